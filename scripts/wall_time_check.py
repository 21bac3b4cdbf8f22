"""Compare the wall time a study's dry run predicts with the time the study then takes.

    flock /work/heavy.lock python scripts/wall_time_check.py [--workers 1 2] [--steps 1000] [--seeds 2]

For each worker count, in a fresh folder: a quickstart-sized study (the quickstart's spec, pre- vs
post-norm x ``--seeds`` seeds: 4 cells of 1000 steps by default), ``ablate study SPEC --dry-run --workers
N`` (its estimate, from the probe of ablate/launch/cell_probe.py), then ``ablate study SPEC --workers N``
timed from start to exit. Prints one row per worker count: predicted, measured, and predicted/measured
(the goal: within 30%). It times, it asserts nothing: run it on an otherwise idle machine (the shared lock),
and put its figures in docs/scaling.md with the command and the date.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ESTIMATE = re.compile(r"^estimated wall time: ([\d.]+) (s|min|h) for (\d+) cells", re.M)
UNIT = {"s": 1.0, "min": 60.0, "h": 3600.0}


def write_study(folder: Path, steps: int, seeds: int) -> Path:
    spec = folder / "walltime.yaml"
    spec.write_text(f"""\
extends: {ROOT / 'experiments' / 'quickstart.yaml'}
name: walltime
train:
  max_steps: {steps}
  eval_every: {max(1, steps // 5)}
  checkpoint_every: {max(1, steps // 5)}
tracking:
  experiment: walltime
ablation:
  axes:
    model.residual: [pre_norm, post_norm]
  seeds: {list(range(seeds))}
""")
    return spec


def ablate(folder: Path, *args: str) -> tuple[subprocess.CompletedProcess[str], float]:
    env = {**os.environ, "MLFLOW_TRACKING_URI": f"sqlite:///{folder / 'mlflow.db'}", "ABLATE_QUIET": "1"}
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "ablate", *args], cwd=folder, env=env, capture_output=True,
                          text=True)
    took = time.monotonic() - started
    if done.returncode != 0:
        raise SystemExit(f"ablate {' '.join(args)} exited {done.returncode}:\n{done.stderr[-3000:]}")
    return done, took


def check(workers: int, steps: int, seeds: int) -> tuple[float, float, str]:
    with tempfile.TemporaryDirectory(prefix="ablate-walltime-") as tmp:
        folder = Path(tmp)
        spec = write_study(folder, steps, seeds)
        dry, dry_s = ablate(folder, "study", str(spec), "--dry-run", "--workers", str(workers))
        found = ESTIMATE.search(dry.stdout)
        if found is None:
            raise SystemExit(f"no estimate in the dry run's output:\n{dry.stdout[-3000:]}")
        predicted = float(found.group(1)) * UNIT[found.group(2)]
        line = next(li for li in dry.stdout.splitlines() if li.startswith("estimated wall time:"))
        _, measured = ablate(folder, "study", str(spec), "--workers", str(workers))
    print(f"  dry run ({dry_s:.0f} s): {line}", flush=True)
    return predicted, measured, line


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--steps", type=int, default=1000)
    parser.add_argument("--seeds", type=int, default=2)
    args = parser.parse_args()
    print(f"quickstart-sized study: 2 variants x {args.seeds} seeds, {args.steps} steps a cell; "
          f"{os.cpu_count()} CPUs, load {os.getloadavg()[0]:.1f} at the start", flush=True)
    rows = []
    for workers in args.workers:
        predicted, measured, _ = check(workers, args.steps, args.seeds)
        rows.append((workers, predicted, measured))
        print(f"workers {workers}: predicted {predicted:.0f} s, measured {measured:.0f} s, "
              f"ratio {predicted / measured:.2f}", flush=True)
    print("\n| workers | predicted | measured | predicted / measured |\n|---:|---:|---:|---:|")
    for workers, predicted, measured in rows:
        print(f"| {workers} | {predicted:.0f} s | {measured:.0f} s | {predicted / measured:.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
