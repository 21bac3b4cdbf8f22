"""How long a study takes: wall time from measured cell times and the parallel slots that run them."""

from __future__ import annotations

import math


def estimate_wall_s(cell_seconds: float, cells: int, parallel: int) -> float:
    """Wall seconds for ``cells`` cells of ``cell_seconds`` each on ``parallel`` slots (whole rounds)."""
    return math.ceil(cells / max(1, parallel)) * cell_seconds
