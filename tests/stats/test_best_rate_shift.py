"""ablate/stats/best_rate_shift.py on searches with a known answer: a loss whose optimum in log2 lr moves by a
set amount between widths, plus seed noise."""

from __future__ import annotations

import math

import numpy as np
import pytest

from ablate.stats.best_rate_shift import transfer, vertex

WIDTHS = (32, 64, 128)
LRS = tuple(1e-3 * 2**i for i in range(6))  # 1e-3 .. 3.2e-2


def search(optimum: dict[int, float], noise: float = 0.003, seeds: int = 3, curvature: float = 0.05,
           seed: int = 0) -> dict[tuple[int, float, int], float]:
    """loss(w, lr, s) = curvature (log2 lr - log2 optimum_w)^2 + width offset + seed offset + noise."""
    rng = np.random.default_rng(seed)
    out = {}
    for s in range(seeds):
        seed_offset = rng.normal(0, 0.02)
        for w in WIDTHS:
            for lr in LRS:
                bowl = curvature * (math.log2(lr) - math.log2(optimum[w])) ** 2
                out[(w, lr, s)] = bowl - 0.1 * math.log2(w) + seed_offset + rng.normal(0, noise)
    return out


def test_a_vertex_lands_on_the_parabolas_minimum() -> None:
    x = [0.0, 1.0, 2.0, 3.0]
    assert vertex(x, [(v - 1.3) ** 2 for v in x]) == (pytest.approx(1.3), True)
    assert vertex(x, [3.0, 2.0, 1.0, 0.5]) == (3.0, False)  # the grid did not bracket the optimum


def test_a_fixed_optimum_is_stable_and_a_moving_one_drifts() -> None:
    fixed = transfer(search({32: 8e-3, 64: 8e-3, 128: 8e-3}))
    assert fixed.verdict == "stable" and abs(fixed.shift) < 0.3
    assert fixed.best_lr(64) == pytest.approx(8e-3, rel=0.25) and all(fixed.bracketed)
    moving = transfer(search({32: 1.6e-2, 64: 8e-3, 128: 4e-3}))  # halves with each doubling of the width
    assert moving.verdict == "drifts" and moving.shift == pytest.approx(-2.0, abs=0.3)
    assert moving.high < 0


def test_noise_larger_than_the_curvature_is_not_settled() -> None:
    noisy = transfer(search({32: 8e-3, 64: 6e-3, 128: 5e-3}, noise=0.2, curvature=0.02, seed=0))
    assert noisy.verdict == "not settled" and noisy.low < 0 < noisy.high


def test_optima_past_the_grids_end_are_bounds_never_a_stable_reading() -> None:
    """Every width's best rate at the grid's top end read as "stable" with a shift of exactly 0 (muP on
    mup-transfer-docs): the optima may lie anywhere past the end, so that is not settled; a drift that the
    bounds can only widen still drifts."""
    past_the_top = transfer(search({32: 0.1, 64: 0.1, 128: 0.1}))
    assert not any(past_the_top.bracketed) and past_the_top.shift == 0.0
    assert past_the_top.verdict == "not settled"
    narrow_past_the_top = transfer(search({32: 0.1, 64: 8e-3, 128: 2e-3}))  # truly only more negative
    assert narrow_past_the_top.bracketed == (False, True, True) and narrow_past_the_top.high < 0
    assert narrow_past_the_top.verdict == "drifts"
    wide_past_the_top = transfer(search({32: 8e-3, 64: 8e-3, 128: 0.1}))  # positive: only more positive
    assert wide_past_the_top.low > 0 and wide_past_the_top.verdict == "drifts"
    wide_below = transfer(search({32: 1.6e-2, 64: 8e-3, 128: 1e-4}))  # negative, the widest past the bottom
    assert wide_below.high < 0 and wide_below.verdict == "drifts"
    undone = transfer(search({32: 1e-4, 64: 2e-3, 128: 1.6e-2}))  # narrowest past the bottom, shift positive
    assert undone.low > 0 and undone.verdict == "drifts"


def test_an_incomplete_search_is_refused() -> None:
    values = search({32: 8e-3, 64: 8e-3, 128: 8e-3})
    values.pop((64, LRS[2], 1))
    with pytest.raises(ValueError, match="incomplete"):
        transfer(values)
