"""Controlled initialisation: every parameter drawn from its own generator, seeded by (seed, name, shape).

Two variants built with the same seed start from identical values in every parameter they share (name and
shape), so a comparison measures the design choice and not the draw. The builder draws only what it owns
by type, the weights of Linear, Conv1d and Embedding (Xavier-uniform, or torch's defaults); a parameter a
registered component creates itself keeps the component's own init (its ``reset_parameters``, run under a
generator seeded for that parameter): QK-norm's gain g0, T5's bias table, ReZero's zero gate, the norms'
gains, a plugin's parameters.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Callable
from typing import cast

import torch
from torch import Tensor, nn


def stable_seed(seed: int, name: str, shape: tuple[int, ...]) -> int:
    """A 63-bit seed from (seed, parameter name, shape) that is the same in every process and version.
    Size-1 kernel dims are dropped: a Conv1d(kernel_size=1) weight (out, in, 1) is seeded (and, same
    count and fans, drawn) like the Linear (out, in) it equals: ``ffn: conv1d`` starts as ``linear``."""
    shape = tuple(shape)
    while len(shape) > 2 and shape[-1] == 1:
        shape = shape[:-1]
    digest = hashlib.sha256(f"{seed}|{name}|{shape}".encode()).digest()
    return int.from_bytes(digest[:8], "little") & (2**63 - 1)


# The modules whose parameters the controlled init draws itself; every other module's parameters come from
# its own ``reset_parameters`` (a registry norm, ReZero's gate, QK-norm's gain, T5's bias table, plugins).
OWNED_BY_TYPE = (nn.Linear, nn.Conv1d, nn.Embedding)
INIT_SCHEMES = ("xavier", "xavier_embed_normal", "default")  # model.init's values


def _fan_in(module: nn.Module) -> int:
    weight = cast(Tensor, module.weight)
    return weight[0].numel()  # in_features * kernel size


def _draw(module: nn.Module, pname: str, p: Tensor, scheme: str, g: torch.Generator, seed: int) -> Tensor:
    """New values for parameter ``pname`` of ``module`` drawn from ``g`` (CPU, float32)."""
    shape = tuple(p.shape)
    if isinstance(module, nn.LayerNorm):
        return torch.zeros(shape) if pname == "bias" else torch.ones(shape)
    if scheme == "xavier_embed_normal" and isinstance(module, nn.Embedding):
        # N(0, d^-1/2): the sqrt(d)-scaled embedding has unit-variance entries (tensor2tensor, fairseq)
        return torch.empty(shape).normal_(0.0, shape[-1] ** -0.5, generator=g)
    # Only the weights this builder owns by type (Linear, Conv1d, Embedding) are Xavier's: a parameter a
    # registered component creates itself (QK-norm's gain g0, T5's bias table) keeps that component's own
    # init, whatever its number of dimensions.
    if scheme.startswith("xavier") and p.dim() >= 2 and isinstance(module, OWNED_BY_TYPE):
        receptive = p[0][0].numel()
        chunks = getattr(module, "fused_chunks", 1)  # a fused QKV weight is initialised like 3 separate ones
        if isinstance(chunks, tuple):  # chunks of different sizes (grouped K, V): each its own Xavier bound
            return torch.cat([torch.empty(rows, *shape[1:]).uniform_(-b, b, generator=g)
                              for rows, b in zip(chunks, _xavier_bounds(p, chunks), strict=True)])
        fan_in, fan_out = p.size(1) * receptive, p.size(0) * receptive // chunks
        bound = math.sqrt(6.0 / (fan_in + fan_out))
        return torch.empty(shape).uniform_(-bound, bound, generator=g)
    if isinstance(module, nn.Linear | nn.Conv1d):  # torch's kaiming_uniform(a=sqrt 5) == U(+-1/sqrt(fan_in))
        bound = 1.0 / math.sqrt(_fan_in(module))
        return torch.empty(shape).uniform_(-bound, bound, generator=g)
    if isinstance(module, nn.Embedding):
        return torch.empty(shape).normal_(0.0, 1.0, generator=g)
    reset: Callable[[], None] | None = getattr(module, "reset_parameters", None)
    if reset is None:
        raise TypeError(f"controlled init does not know how to initialise {type(module).__name__}.{pname}")
    # Norms, ReZero's gate, T5's bias table, plugins: the module's own reset_parameters under a global RNG
    # seeded for this parameter only (the registry's norms start at fixed values: ones / zeros / sqrt(d)).
    saved = {n: q.detach().clone() for n, q in module.named_parameters(recurse=False)}
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        reset()
    value = getattr(module, pname).detach().float().cpu().clone()
    with torch.no_grad():
        for n, q in module.named_parameters(recurse=False):
            q.copy_(saved[n])
    return value


def _xavier_bounds(p: Tensor, rows: tuple[int, ...]) -> list[float]:
    """The Xavier-uniform bound of each chunk of ``rows`` output rows of a fused weight."""
    receptive = p[0][0].numel()
    return [math.sqrt(6.0 / (p.size(1) * receptive + n * receptive)) for n in rows]


def drawn_std(module: nn.Module, pname: str, p: Tensor, scheme: str) -> float | None:
    """The standard deviation of what :func:`init_parameters` draws for parameter ``pname`` of ``module``
    (of the first chunk of a fused weight), from the scheme's formula; None where the component's own
    ``reset_parameters`` decides (norms' ones, gates), or a norm's fixed values. muP's init multipliers
    compare it with the same parameter's at the base width (registry/parametrisation.py)."""
    if isinstance(module, nn.LayerNorm):
        return None
    if scheme == "xavier_embed_normal" and isinstance(module, nn.Embedding):
        return float(p.size(-1) ** -0.5)
    if scheme.startswith("xavier") and p.dim() >= 2 and isinstance(module, OWNED_BY_TYPE):
        chunks = getattr(module, "fused_chunks", 1)
        rows = chunks if isinstance(chunks, tuple) else (p.size(0) // chunks,)
        return _xavier_bounds(p, rows)[0] / math.sqrt(3.0)  # U(-b, b) has std b / sqrt(3)
    if isinstance(module, nn.Linear | nn.Conv1d):
        return 1.0 / math.sqrt(_fan_in(module)) / math.sqrt(3.0)
    if isinstance(module, nn.Embedding):
        return 1.0
    return None


@torch.no_grad()
def init_parameters(model: nn.Module, seed: int, scheme: str = "xavier") -> None:
    """Initialise every parameter from its own generator seeded by (seed, name, shape).

    ``xavier``: Xavier-uniform for the weights of Linear, Conv1d and Embedding (per chunk for fused
    projections), the modules' defaults for biases (the Annotated Transformer's and the tutorials' recipe);
    ``xavier_embed_normal``: the same, but token embeddings from N(0, d_model^-1/2), as Vaswani et al.'s
    tensor2tensor and fairseq's Transformer draw them, so that the sqrt(d_model)-scaled embedding has
    unit-variance entries (with Xavier and a vocabulary much larger than d_model they are about
    sqrt(2 d / V) instead: 0.35 for V 1000, d 64, against a sinusoid's 0.71); ``default``: the modules'
    defaults (Linear/Conv U(+-1/sqrt(fan_in)), Embedding N(0, 1)). Every other module (norms, gates,
    QK-norm's gain, bias tables, plugins' parameters) starts from its own ``reset_parameters``, under a
    generator seeded for that parameter, so a random component init is controlled too. Tied parameters are
    drawn once, under the name they are first registered with.
    """
    if scheme not in INIT_SCHEMES:
        raise ValueError(f"unknown init {scheme!r}; accepted: {', '.join(INIT_SCHEMES)}")
    seen: set[int] = set()
    for mod_name, module in model.named_modules():
        for pname, p in module.named_parameters(recurse=False):
            if id(p) in seen:
                continue
            seen.add(id(p))
            full = f"{mod_name}.{pname}" if mod_name else pname
            s = stable_seed(seed, full, tuple(p.shape))
            p.copy_(_draw(module, pname, p, scheme, torch.Generator().manual_seed(s), s))
