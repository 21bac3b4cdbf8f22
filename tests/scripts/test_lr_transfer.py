"""scripts/lr_transfer.py's reading of a study's runs.csv: the baseline's values fill what a cell kept, muP's
base width borrows the standard cells, and a diverged cell counts as its parametrisation's worst loss, so
a best rate just below a diverging one is bracketed rather than read at the grid's edge."""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path

from tests.scripts.script_loader import load_script

COLUMNS = ["variant", "seed", "status", "model.d_model", "model.parametrisation", "train.optimizer.lr",
           "val/loss"]


def loss(width: int, lr: float, parametrisation: str) -> float:
    """A parabola in log2 lr whose vertex sits at 2^-5 for muP at every width (its base width 32 is the
    standard model), at 2^-5 - log2(w/32) for standard."""
    best = -5.0 if parametrisation == "mup" else -5.0 - math.log2(width / 32)
    return 3.0 + 0.05 * (math.log2(lr) - best) ** 2


def write_report(folder: Path, diverged: set[tuple[str, int, float]]) -> Path:
    """A study's runs.csv and the export's baseline run (standard d64 at 2^-7): every other cell a variant."""
    rows = []
    for parametrisation, widths in (("standard", (32, 64, 128)), ("mup", (64, 128))):
        for width in widths:
            for lr in (2.0 ** -8, 2.0 ** -7, 2.0 ** -6, 2.0 ** -5, 2.0 ** -4):
                for seed in (0, 1):
                    baseline = parametrisation == "standard" and width == 64 and lr == 2.0 ** -7
                    status = "diverged" if (parametrisation, width, lr) in diverged else "finished"
                    rows.append({
                        "variant": "baseline" if baseline else f"{parametrisation} d{width} lr{lr}",
                        "seed": seed, "status": status,
                        "model.d_model": "" if baseline else width,
                        "model.parametrisation": "" if parametrisation == "standard" else "mup",
                        "train.optimizer.lr": "" if baseline else lr,
                        "val/loss": ("" if status == "diverged"
                                     else loss(width, lr, parametrisation) + 0.001 * seed)})
    with open(folder / "runs.csv", "w", newline="") as fh:
        writer = csv.DictWriter(fh, COLUMNS)
        writer.writeheader()
        writer.writerows(rows)
    cell = folder / "export" / "cells" / "b"
    cell.mkdir(parents=True)
    cell.joinpath("run.json").write_text(json.dumps({
        "tags": {"ablate.variant": "baseline"},
        "params": {"model.d_model": "64", "model.parametrisation": "standard",
                   "train.optimizer.lr": str(2.0 ** -7)}}))
    return folder


def test_the_baseline_fills_its_kept_fields_and_mup_borrows_its_base_width(tmp_path: Path) -> None:
    script = load_script("lr_transfer")
    cells = script.read(write_report(tmp_path, set()), "val/loss")
    assert set(cells) == {"standard", "mup"}
    assert cells["standard"][(64, 2.0 ** -7, 1)] == loss(64, 2.0 ** -7, "standard") + 0.001
    assert cells["mup"][(32, 2.0 ** -6, 0)] == cells["standard"][(32, 2.0 ** -6, 0)]
    assert len(cells["mup"]) == 3 * 5 * 2
    result = script.transfer(cells["mup"])
    assert result.verdict == "stable" and abs(result.shift) < 0.1
    assert script.transfer(cells["standard"]).verdict == "drifts"


def test_a_diverged_rate_counts_as_the_worst_loss_and_keeps_the_grid_whole(tmp_path: Path) -> None:
    script = load_script("lr_transfer")
    # muP diverges at the grid's top rate at its widest width, on both seeds: its best, one step below,
    # keeps a neighbour on each side
    cells = script.read(write_report(tmp_path, {("mup", 128, 2.0 ** -4)}), "val/loss")
    own = [v for (w, lr, _), v in cells["mup"].items() if w != 32 and not (w == 128 and lr == 2.0 ** -4)]
    assert cells["mup"][(128, 2.0 ** -4, 0)] == cells["mup"][(128, 2.0 ** -4, 1)] == max(own)
    assert len(cells["mup"]) == 3 * 5 * 2  # no cell is missing: the search stays complete
    result = script.transfer(cells["mup"])
    assert all(result.bracketed) and result.verdict == "stable"
    assert result.best_lr(128) < 2.0 ** -4
