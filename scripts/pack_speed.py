"""Packed cells against one cell a process: the packed step's tokens a second against the same K cells'
models stepped one after another in one loop (the gain of packing itself, not of a process count), and a
study's cells an hour packed (``--pack K``) against unpacked (``--pack 1``), each study in a fresh folder.

    python scripts/pack_speed.py --spec experiments/lm-docs-cell.yaml --packs 1 2 4 8 16 --steps 10
    python scripts/pack_speed.py --spec experiments/lm-docs-cell.yaml --study --seeds 16 --packs 4 8 16
    python scripts/pack_speed.py --spec experiments/lm-docs-cell.yaml --packs 2 --steps 1 \\
        --set model.d_model=16 --set model.decoder_layers=1      # a check at tiny settings (seconds)

The step: K cells of the spec (seeds spec.seed .. + K - 1) built once; after a warm-up step each,
``--steps`` optimizer steps of each cell one after another, then the same steps packed; tokens a second =
every cell's target tokens over the time. The study: the spec with an ``ablation`` section of one shape
(its learning rate and twice it, ``--seeds`` / 2 seeds each: ``--seeds`` cells), ``--max-steps`` steps a
cell, run by ``ablate study`` in a subprocess per bound; cells an hour = cells over the study's wall time
(its probe included: ``--packs auto`` times the default a user gets). On a machine without a GPU the GPU
lines print "not measured". Run it on an otherwise idle machine.
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

import torch
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from ablate.run.pack_probe import probe_pack  # noqa: E402
from ablate.spec.load import load_spec  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


def step_rows(spec_path: str, overrides: list[str], packs: list[int], steps: int) -> list[str]:
    """One table row per K: the loop's and the pack's tokens a second, and their ratio."""
    spec = load_spec(spec_path, [*overrides, "tracking.enabled=false"])
    rows = ["| K | one after another, tokens/s | packed, tokens/s | packed / loop |", "|---|---|---|---|"]
    tokens = spec.data.batch_tokens * spec.train.accumulation  # a cell's step, at most (padding aside)
    for k in packs:
        if k < 2:
            continue
        probe = probe_pack(spec, k, steps)
        if probe.problems:
            rows.append(f"| {k} | cannot pack: {'; '.join(probe.problems)} | | |")
            continue
        loop, packed = k * steps * tokens / probe.alone_s, k * steps * tokens / probe.packed_s
        rows.append(f"| {k} | {loop:,.0f} | {packed:,.0f} | {probe.speedup:.2f}x |")
    return rows


def study_spec(spec_path: str, cells: int, max_steps: int, folder: Path) -> Path:
    """The spec as a study of ``cells`` cells of one shape: its learning rate and twice it (a tuning grid's
    two points), each at ``cells / 2`` seeds; `extends` keeps its own paths."""
    lr = load_spec(spec_path, []).train.optimizer.lr
    path = folder / "pack-speed.yaml"
    text = {"extends": str(Path(spec_path).resolve()), "name": "pack-speed",
            "train": {"max_steps": max_steps, "eval_every": max_steps},
            "ablation": {"axes": {"train.optimizer.lr": [2 * lr]}, "seeds": list(range(max(1, cells // 2))),
                         "metric": "val/loss"}}
    path.write_text(yaml.safe_dump(text, sort_keys=False))
    return path


def estimated_seconds(dry_run_out: str) -> float | None:
    """The dry run's wall-time estimate in seconds: its packed figure where it gives one, else its whole
    study's ("estimated wall time: 12 min for 6 cells ...; packed: 8.2 min (...)")."""
    found = re.findall(r"(?:estimated wall time|packed): ([0-9.]+) (s|min|h)\b", dry_run_out)
    if not found:
        return None
    value, unit = found[-1]
    return float(value) * {"s": 1, "min": 60, "h": 3600}[unit]


def study_rows(spec_path: str, overrides: list[str], packs: list[str], seeds: int,
               max_steps: int) -> list[str]:
    """Each bound's study, timed, beside what its dry run estimated beforehand (the issue's bound: within
    30% of the measured time)."""
    rows = ["| --pack | cells | wall s | cells/hour | against --pack 1 | dry run's estimate | measured / "
            "estimate |", "|---|---|---|---|---|---|---|"]
    base = None
    for bound in ["1", *packs]:
        with tempfile.TemporaryDirectory(prefix="pack-speed-") as tmp:
            folder = Path(tmp)
            path = study_spec(spec_path, seeds, max_steps, folder)
            command = [sys.executable, "-m", "ablate", "-q", "study", str(path), "--pack", bound,
                       *(f"--set={o}" for o in overrides)]
            env = {**os.environ, "PYTHONPATH": str(ROOT),
                   "MLFLOW_TRACKING_URI": f"sqlite:///{folder / 'm.db'}"}
            env.pop("ABLATE_PACK_BOUND", None)
            dry = subprocess.run([*command, "--dry-run"], cwd=folder, env=env, capture_output=True, text=True)
            estimate = estimated_seconds(dry.stdout)
            started = time.perf_counter()
            done = subprocess.run(command, cwd=folder, env=env, capture_output=True, text=True)
            wall = time.perf_counter() - started
            if done.returncode != 0:
                rows.append(f"| {bound} | failed: {done.stderr.strip().splitlines()[-1:]} | | | | | |")
                continue
            seeds = 2 * max(1, seeds // 2)
            per_hour = seeds * 3600 / wall
            base = base or per_hour
            shown = f"{estimate:.0f} s" if estimate else "none printed"
            ratio = f"{wall / estimate:.2f}" if estimate else ""
            rows.append(f"| {bound} | {seeds} | {wall:.1f} | {per_hour:,.0f} | {per_hour / base:.2f}x "
                        f"| {shown} | {ratio} |")
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--spec", default=str(ROOT / "experiments" / "lm-docs-cell.yaml"))
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument("--packs", nargs="+", default=["2", "4", "8"])
    parser.add_argument("--steps", type=int, default=10, help="timed steps of the step comparison")
    parser.add_argument("--study", action="store_true", help="also time a study's cells an hour")
    parser.add_argument("--seeds", type=int, default=16, help="cells of the study (two rates, half each)")
    parser.add_argument("--max-steps", type=int, default=50, help="steps of each study cell")
    args = parser.parse_args()
    device = "cuda: " + torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cpu"
    print(f"device: {device}, {torch.get_num_threads()} threads; spec {args.spec} {args.overrides}")
    sizes = [int(k) for k in args.packs if k.isdigit()]  # "auto" is a study's bound, not a pack size
    print("\n".join(step_rows(args.spec, args.overrides, sizes, args.steps)))
    if args.study:
        print("\n".join(study_rows(args.spec, args.overrides, args.packs, args.seeds, args.max_steps)))
    if not torch.cuda.is_available():
        print("GPU (cells an hour at d256 and d512, 4 layers, K = 4, 8, 16 against one cell a process and "
              "--workers-per-gpu K): not measured (no GPU here)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
