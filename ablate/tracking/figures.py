"""Figures a run logs as artifacts, drawn here so that the runner never draws (matplotlib, Agg-free
``Figure`` objects: no display and no global pyplot state)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from matplotlib.figure import Figure

from ablate.spec import metricnames


def loss_curve(train: Sequence[tuple[int, float]], val: Sequence[tuple[int, float]]) -> Any:
    """The training loss (mean per logging window) and validation loss (per evaluation) against the
    optimizer step, as a matplotlib ``Figure``; None when there is nothing to draw."""
    if not train and not val:
        return None

    fig = Figure(figsize=(6, 3.5), dpi=100)
    ax = fig.add_subplot()
    if train:
        ax.plot(*zip(*train, strict=True), label=metricnames.TRAIN_LOSS)
    if val:
        ax.plot(*zip(*val, strict=True), marker="o", label=metricnames.VAL_LOSS)
    ax.set_xlabel("optimizer step")
    ax.set_ylabel("cross-entropy")
    ax.legend()
    fig.tight_layout()
    return fig
