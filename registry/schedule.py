"""Learning-rate schedules (axis ``schedule``, a recipe axis: the spec's ``train.schedule.name``).

Component contract: a function ``fn(step: int, *, warmup: int, total: int | None, **options) -> float``,
the multiplier of the peak learning rate (``train.optimizer.lr``) at optimizer step ``step`` (0-based; the
trainer's LambdaLR calls it once per step). Every schedule starts with the same linear warm-up,
``(step + 1) / warmup`` for the first ``warmup`` steps (:func:`warmed_up`; 0: none), then its own shape. A
schedule that decays towards the end of training carries ``needs_total = True`` and gets ``total``, the
optimizer steps the run's budget allows (``planned_steps``: max_steps, or epochs x batches). The trainer
logs the resulting rate at every logging step (``train/lr``), as it always has.

Each shape is checked at named steps in tests/registry/test_recipe_formulas.py.
"""

from __future__ import annotations

import math
from collections.abc import Callable

from registry import Axis, Option, declare_axis, register

AXIS = declare_axis(Axis(
    kind="schedule",
    default="inverse_sqrt",
    doc="the learning rate's shape over training, after a linear warm-up to train.optimizer.lr",
    contract="fn(step, *, warmup, total, **options) -> float (multiplier of the peak learning rate)",
    hooks=("the trainer: LambdaLR scales every parameter group's rate by it once per optimizer step",),
    section="train.schedule",
))

Schedule = Callable[..., float]


def warmed_up(step: int, warmup: int) -> float | None:
    """The warm-up's multiplier ``(step + 1) / warmup`` while it lasts, else None."""
    s = step + 1
    return s / warmup if warmup and s <= warmup else None


def _needs_total(fn: Schedule) -> Schedule:
    fn.needs_total = True  # type: ignore[attr-defined]
    return fn


def _decay_progress(step: int, warmup: int, total: int | None, name: str) -> float:
    """How far the steps after the warm-up have gone towards ``total``, in [0, 1] (1 from there on)."""
    if total is None:
        raise ValueError(f"{name} with an epochs-only budget needs total_steps (see planned_steps)")
    total = max(total, warmup + 1)
    return min(1.0, (step + 1 - warmup) / max(1, total - warmup))


MIN_LR_RATIO = Option(
    "min_lr_ratio", float, 0.0, "the floor the decay ends at, as a fraction of the peak learning rate",
    ge=0.0, le=1.0, always=True,  # a plain train.schedule field before schedules were an axis
)


@register("schedule", "constant")
def constant(step: int, *, warmup: int, total: int | None = None) -> float:
    """Constant after the warm-up (the tutorials a-blog-2025 and e-notebook-2024 train at Adam 1e-4)."""
    return min(1.0, (step + 1) / warmup) if warmup else 1.0


@register("schedule", "inverse_sqrt")
def inverse_sqrt(step: int, *, warmup: int, total: int | None = None) -> float:
    """Vaswani et al. 2017's schedule (eq. 3, "Noam") normalised to peak at 1 after the warm-up:
    ``min((s+1)/w, sqrt(w/(s+1)))``, so that ``train.optimizer.lr`` is the peak rate; without a warm-up
    ``1/sqrt(s+1)``."""
    s = step + 1
    if warmup == 0:
        return 1.0 / math.sqrt(s)
    return min(s / warmup, math.sqrt(warmup / s))


@register("schedule", "cosine", options=(MIN_LR_RATIO,))
@_needs_total
def cosine(step: int, *, warmup: int, total: int | None = None, min_lr_ratio: float = 0.0) -> float:
    """Cosine decay (Loshchilov & Hutter 2017, SGDR without restarts) from the peak to ``min_lr_ratio`` x
    the peak at the last step: ``floor + (1 - floor) * (1 + cos(pi * progress)) / 2``, flat at the floor
    beyond it."""
    ramp = warmed_up(step, warmup)
    if ramp is not None:
        return ramp
    progress = _decay_progress(step, warmup, total, "cosine")
    return min_lr_ratio + (1 - min_lr_ratio) * 0.5 * (1 + math.cos(math.pi * progress))


@register("schedule", "linear", options=(MIN_LR_RATIO,))
@_needs_total
def linear(step: int, *, warmup: int, total: int | None = None, min_lr_ratio: float = 0.0) -> float:
    """Linear decay from the peak to ``min_lr_ratio`` x the peak at the last step (BERT, Devlin et al.
    2019; GPT-3): ``floor + (1 - floor) * (1 - progress)``."""
    ramp = warmed_up(step, warmup)
    if ramp is not None:
        return ramp
    progress = _decay_progress(step, warmup, total, "linear")
    return min_lr_ratio + (1 - min_lr_ratio) * (1 - progress)


WSD_SHAPES: dict[str, Callable[[float], float]] = {
    "linear": lambda x: 1 - x,
    "cosine": lambda x: 0.5 * (1 + math.cos(math.pi * x)),
    "1-sqrt": lambda x: 1 - math.sqrt(x),
}

WSD_OPTIONS = (
    MIN_LR_RATIO,
    Option("wsd_decay_fraction", float, 0.2,
           "the fraction of all steps the final decay takes (Hägele et al. 2024: 0.2 matches cosine)",
           gt=0.0, le=1.0, hint="a fraction of the run in (0, 1], e.g. 0.2: the last 20% of the steps"),
    Option("wsd_shape", str, "1-sqrt",
           "the decay's shape over its steps x in [0, 1]: linear 1 - x; cosine (1 + cos(pi x)) / 2; 1-sqrt "
           "1 - sqrt(x) (Hägele et al. 2024, eq. 1: the best of the three)",
           choices=tuple(WSD_SHAPES)),
)


@register("schedule", "wsd", options=WSD_OPTIONS)
@_needs_total
def wsd(step: int, *, warmup: int, total: int | None = None, min_lr_ratio: float = 0.0,
        wsd_decay_fraction: float = 0.2, wsd_shape: str = "1-sqrt") -> float:
    """Warmup-stable-decay (Hu et al. 2024, MiniCPM, section 4.1; Hägele et al. 2024, "Scaling Laws and
    Compute-Optimal Training Beyond Fixed Training Durations"): the warm-up, the peak rate held, then the
    last ``wsd_decay_fraction`` of all steps decaying to ``min_lr_ratio`` x the peak along ``wsd_shape``:
    ``floor + (1 - floor) * shape(x)``, ``x`` the decay's progress in [0, 1]. The decay starts at step
    ``total - round(wsd_decay_fraction * total)`` (never inside the warm-up)."""
    ramp = warmed_up(step, warmup)
    if ramp is not None:
        return ramp
    if total is None:
        raise ValueError("wsd with an epochs-only budget needs total_steps (see planned_steps)")
    decay_steps = max(1, round(wsd_decay_fraction * total))
    start = max(warmup, total - decay_steps)  # the first step of the decay (0-based)
    if step < start:
        return 1.0
    progress = min(1.0, (step + 1 - start) / max(1, total - start))
    return min_lr_ratio + (1 - min_lr_ratio) * WSD_SHAPES[wsd_shape](progress)
