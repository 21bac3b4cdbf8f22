"""One contract for every registered component of every kind.

The parameter list comes from ``registry.names``, so a newly registered component (built-in or
plugin) is covered without touching this file; a new *kind* needs a harness below (a test fails
until it has one). Each harness wraps the component in a module with a ``forward(x)`` exercising
its contract and says what output shape to expect.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch
from torch import Tensor, nn

import registry
from registry.masking import AttnMask, make_mask

# Small tensors: one thread is faster and makes reductions bitwise repeatable (reference values).
pytestmark = pytest.mark.usefixtures("single_thread")
registry.load_plugins()  # installed entry-point plugins are covered too (lookups would load them anyway)

D, HEADS, B, T, S = 16, 2, 2, 5, 6


def _key_padding() -> AttnMask:
    pad = torch.zeros(B, S, dtype=torch.bool)
    pad[1, 4:] = True  # the second sentence is shorter; no query row is fully masked
    return make_mask("-inf", float("-inf")).build(pad[:, None, None, :], torch.float32)


class Residual(nn.Module):
    def __init__(self, name: str) -> None:
        super().__init__()
        self.comp = registry.get("residual", name)(registry.get("norm", "builtin")(D), dropout=0.0)
        self.sublayer = nn.Linear(D, D)

    def forward(self, x: Tensor) -> Tensor:
        return self.comp(x, self.sublayer)


class Positions(nn.Module):
    def __init__(self, name: str) -> None:
        super().__init__()
        self.comp = registry.get("positions", name)(D, max_positions=16, dropout=0.0)

    def forward(self, x: Tensor) -> Tensor:
        return self.comp(x, start_pos=3)


class FFN(nn.Module):
    def __init__(self, name: str) -> None:
        super().__init__()
        self.comp = registry.get("ffn", name)(D, 2 * D, dropout=0.0)

    def forward(self, x: Tensor) -> Tensor:
        return self.comp(x)


class Norm(nn.Module):
    def __init__(self, name: str) -> None:
        super().__init__()
        self.comp = registry.get("norm", name)(D, eps=1e-6, affine="per_feature")

    def forward(self, x: Tensor) -> Tensor:
        return self.comp(x)


class Mask(nn.Module):
    """Masked scores -> softmax: the mask's only job, on a partially masked (B, heads, T, T) block."""

    def __init__(self, name: str) -> None:
        super().__init__()
        self.comp = registry.get("mask", name)()
        self.register_buffer("blocked", torch.ones(T, T, dtype=torch.bool).triu(1))

    def forward(self, x: Tensor) -> Tensor:
        scores = x[..., :T].reshape(B, 1, T, T).expand(B, HEADS, T, T)
        return torch.softmax(self.comp(scores, self.blocked).float(), dim=-1)


class Attention(nn.Module):
    """Self-attention with key padding, plus cross-attention to a memory (both halves of the contract)."""

    def __init__(self, name: str) -> None:
        super().__init__()
        cls = registry.get("attention", name)
        self.self_attn = cls(D, HEADS, dropout=0.0)
        self.cross_attn = cls(D, HEADS, dropout=0.0, cross=True)

    def forward(self, x: Tensor) -> Tensor:
        memory = x.flip(1)
        h = self.self_attn(memory, mask=_key_padding())  # (B, S, D)
        return self.cross_attn(x[:, :T], h, mask=_key_padding())


# kind -> (harness class, input shape, output shape)
HARNESS: dict[str, tuple[Callable[[str], nn.Module], tuple[int, ...], tuple[int, ...]]] = {
    "residual": (Residual, (B, T, D), (B, T, D)),
    "positions": (Positions, (B, T, D), (B, T, D)),
    "ffn": (FFN, (B, T, D), (B, T, D)),
    "norm": (Norm, (B, T, D), (B, T, D)),
    "mask": (Mask, (B, T, T), (B, HEADS, T, T)),
    "attention": (Attention, (B, S, D), (B, T, D)),
}

# Built-in kinds first, then any kind a plugin added (it fails the harness test until it has a harness).
KINDS = [*registry.KINDS, *(k for k in registry.REGISTRY.kinds() if k not in registry.KINDS)]
CASES = [(kind, name) for kind in KINDS for name in registry.names(kind)]


def _build(kind: str, name: str, seed: int) -> nn.Module:
    torch.manual_seed(seed)
    module = HARNESS[kind][0](name)
    with torch.no_grad():  # the component's own 1-D parameters too, so the round trip is not trivial
        for p in module.parameters():
            p.add_(0.1 * torch.randn(p.shape))
    return module.eval()


def _input(kind: str) -> Tensor:
    g = torch.Generator().manual_seed(7)
    return torch.randn(HARNESS[kind][1], generator=g)


def test_every_kind_has_components_and_a_harness() -> None:
    for kind in KINDS:
        assert registry.names(kind), f"no component registered for {kind}"
        assert kind in HARNESS, f"kind {kind!r} has no contract harness"


@pytest.mark.parametrize("kind,name", CASES, ids=[f"{k}:{n}" for k, n in CASES])
def test_component_contract(kind: str, name: str) -> None:
    entry = registry.REGISTRY.entry(kind, name)
    assert entry.summary, "a component's docstring says what it is and where it comes from"

    module = _build(kind, name, seed=0)
    x = _input(kind).requires_grad_(True)
    out = module(x)
    assert out.shape == HARNESS[kind][2]
    assert torch.isfinite(out).all()

    # Backward: a random projection of the output reaches the input and every parameter.
    weight = torch.randn(out.shape, generator=torch.Generator().manual_seed(3))
    (out * weight).sum().backward()
    assert x.grad is not None and x.grad.abs().sum() > 0
    for pname, p in module.named_parameters():
        assert p.grad is not None and torch.isfinite(p.grad).all(), pname
        assert p.grad.abs().sum() > 0, f"no gradient reaches {pname}"

    # bf16 autocast on CPU: runs, finite, and agrees with fp32 to bf16 precision.
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        low = module(x.detach())
    assert torch.isfinite(low).all()
    torch.testing.assert_close(low.float(), out.detach(), atol=0.1, rtol=0.05)

    # State dict round trip into a fresh, differently initialised instance.
    fresh = _build(kind, name, seed=1)
    params = list(module.parameters())
    if params:
        assert any(not torch.equal(a, b) for a, b in zip(params, fresh.parameters(), strict=True))
    fresh.load_state_dict(module.state_dict())
    with torch.no_grad():
        assert torch.equal(fresh(x.detach()), module(x.detach()))


@pytest.mark.parametrize("name", registry.names("mask"))
def test_mask_name_is_its_fill(name: str) -> None:
    """A mask is registered under the canonical spelling of its fill (what ModelSpec.mask holds)."""
    from ablate.spec.experiment import format_mask_fill

    comp = registry.get("mask", name)()
    assert format_mask_fill(comp.fill) == name
