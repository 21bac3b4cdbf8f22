"""The coordinate check of a parametrisation (Yang et al. 2022, "Tensor Programs V", section 7 and
figure 5; the ``mup`` package's ``get_coord_data``): train the same small decoder-only model at several
widths for a few steps with one learning rate and record, at each step, the mean absolute value of the
coordinates of the last layer's output and of the output logits. Under muP they stay about flat across
widths; under the standard parametrisation they grow with the width once training moves the weights
(Adam's updates of every hidden matrix add up over its fan-in). tests/engine/test_mup.py asserts it and
``scripts/coord_check.py`` draws it (docs/recipe.md).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from ablate.engine.builders import build_lm
from ablate.engine.decoder_only import DecoderOnlyLM
from ablate.engine.trainer import build_optimizer
from ablate.spec.experiment import ModelSpec, TrainSpec

VOCAB, BLOCK, BATCH = 64, 32, 8  # random tokens: the check is about scales, not what is learnt


@dataclass(frozen=True)
class Coordinates:
    """Mean |x| of the last layer's output (B, T, d) and of the logits (B, T, V), before each step."""

    width: int
    hidden: list[float]
    logits: list[float]


def model_spec(parametrisation: str, width: int, base_width: int) -> ModelSpec:
    extra = {"mup_base_width": base_width} if parametrisation == "mup" else {}
    return ModelSpec.model_validate({"arch": "decoder_only", "d_model": width, "heads": 4, "d_ff": 4 * width,
                                     "decoder_layers": 2, "dropout": 0.0, "max_positions": BLOCK,
                                     "parametrisation": parametrisation, **extra})


@torch.no_grad()
def _measure(model: DecoderOnlyLM, ids: torch.Tensor) -> tuple[float, float]:
    seen: dict[str, torch.Tensor] = {}
    last: torch.nn.Module = model.decoder.layers[-1]
    hook = last.register_forward_hook(lambda m, i, o: seen.__setitem__("h", o))
    logits = model(ids)
    hook.remove()
    return float(seen["h"].abs().mean()), float(logits.abs().mean())


def coordinates(parametrisation: str, width: int, *, base_width: int = 32, lr: float = 0.03, steps: int = 4,
                seed: int = 0) -> Coordinates:
    """Train ``steps`` Adam steps on random token blocks; the coordinates' sizes before each step and
    after the last (``steps + 1`` readings)."""
    model = build_lm(model_spec(parametrisation, width, base_width), VOCAB, seed=seed)
    train = TrainSpec.model_validate({"optimizer": {"name": "adam", "lr": lr, "betas": [0.9, 0.95],
                                                    "eps": 1e-8}})
    optimizer = build_optimizer(model, train)
    g = torch.Generator().manual_seed(seed + 1)
    hidden, logits = [], []
    for step in range(steps + 1):
        ids = torch.randint(3, VOCAB, (BATCH, BLOCK + 1), generator=g)
        h, z = _measure(model, ids[:, :-1])
        hidden.append(h)
        logits.append(z)
        if step == steps:
            break
        out = model(ids[:, :-1])  # (B, T, V)
        loss = F.cross_entropy(out.flatten(0, 1), ids[:, 1:].flatten())
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
    return Coordinates(width, hidden, logits)


def check(parametrisation: str, widths: Sequence[int] = (32, 64, 128, 256), *, base_width: int = 32,
          lr: float = 0.03, steps: int = 4, seed: int = 0) -> list[Coordinates]:
    """:func:`coordinates` at every width."""
    return [coordinates(parametrisation, w, base_width=base_width, lr=lr, steps=steps, seed=seed)
            for w in widths]


def growth(rows: Sequence[Coordinates], step: int, what: str = "hidden") -> float:
    """The slope of log(mean |x|) against log(width) at ``step``, widest against narrowest: 0 is flat,
    1 grows like the width."""
    first, last = rows[0], rows[-1]
    a, b = getattr(first, what)[step], getattr(last, what)[step]
    return math.log(b / a) / math.log(last.width / first.width)
