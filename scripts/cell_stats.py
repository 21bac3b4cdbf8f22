"""Time and score a study cell over several seeds: the figures a study cell's header must state.

    ABLATE_DATA_DIR=../shared/data/multi30k python scripts/cell_stats.py experiments/multi30k-cell.yaml \
        --seeds 0 1 2 3 4

Runs ``ablate run SPEC --set seed=K`` one seed after the other (one training process at a time: two that
each use both cores run several times slower), times each whole command, reads the run's summary.json and
prints per seed the wall time, val BLEU and test BLEU, then their means and the seed-to-seed standard
deviation (n - 1). A seed that already finished is reported from its summary, not retrained: the times of
such seeds are left out. Run it on an otherwise idle machine.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path


def run_seed(spec: str, seed: int, extra: list[str]) -> tuple[float | None, dict[str, float]]:
    """(wall seconds of the whole command or None when it was already finished, the run's metrics)."""
    started, wall_clock_start = time.perf_counter(), time.time()
    proc = subprocess.run([sys.executable, "-m", "ablate", "run", spec, "--set", f"seed={seed}", *extra],
                          capture_output=True, text=True)
    wall = time.perf_counter() - started
    if proc.returncode != 0:
        raise SystemExit(f"seed {seed}: ablate run failed (exit {proc.returncode}): "
                         f"{proc.stderr.strip().splitlines()[-1] if proc.stderr.strip() else ''}")
    lines = proc.stdout.splitlines()
    run_dir = next((line.split()[-1] for line in lines if line.strip().startswith("run dir")), None)
    if run_dir is None:
        raise SystemExit(f"seed {seed}: no run dir in the output of ablate run")
    path = Path(run_dir) / "summary.json"
    already = path.stat().st_mtime < wall_clock_start  # written before this command: reported, not trained
    return (None if already else wall), json.loads(path.read_text())["metrics"]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("spec")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4])
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE")
    args = parser.parse_args(argv)
    extra = [x for o in args.overrides for x in ("--set", o)]
    rows = []
    for seed in args.seeds:
        wall, metrics = run_seed(args.spec, seed, extra)
        rows.append((seed, wall, metrics.get("val/bleu"), metrics.get("test/bleu")))
        shown = "finished before" if wall is None else f"{wall:7.1f} s"
        print(f"seed {seed}: {shown}  val/bleu {rows[-1][2]}  test/bleu {rows[-1][3]}", flush=True)
    for name, column in (("wall s", 1), ("val/bleu", 2), ("test/bleu", 3)):
        values = [float(v) for r in rows if (v := r[column]) is not None]
        if len(values) >= 2:
            print(f"{name:10s} mean {statistics.mean(values):8.2f}  sd {statistics.stdev(values):6.2f}  "
                  f"(n={len(values)})")
        elif values:
            print(f"{name:10s} {values[0]:8.2f} (one value)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
