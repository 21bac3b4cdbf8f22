"""Packed cells against one cell a process: the packed step's tokens a second against the same K cells'
models stepped one after another in one loop (the gain of packing itself, not of a process count), and a
study's cells an hour packed (``--pack K``) against unpacked (``--pack 1``), each study in a fresh folder.

    python scripts/pack_speed.py --spec experiments/lm-docs-cell.yaml --packs 1 2 4 8 16 --steps 10
    python scripts/pack_speed.py --spec experiments/lm-docs-cell.yaml --study --seeds 16 --packs 4 8 16
    python scripts/pack_speed.py --spec experiments/lm-docs-cell.yaml --packs 2 --steps 1 \\
        --set model.d_model=16 --set model.decoder_layers=1      # a check at tiny settings (seconds)
    python scripts/pack_speed.py --ladder experiments/ablations/ladder-kdocs.yaml --packs auto --study \\
        --seeds 8 --max-steps 410 --rounds 2       # each rung of a ladder, long enough for auto to probe

The step: K cells of the spec (seeds spec.seed .. + K - 1) built once; after a warm-up step each,
``--steps`` optimizer steps of each cell one after another, then the same steps packed; tokens a second =
every cell's target tokens over the time. The study: the spec with an ``ablation`` section of one shape
(its learning rate and twice it, ``--seeds`` / 2 seeds each: ``--seeds`` cells), ``--max-steps`` steps a
cell, run by ``ablate study`` in a subprocess per bound; cells an hour = cells over the study's wall time
(its probe included: ``--packs auto`` times the default a user gets), ``--rounds`` times each, the bounds
alternating, with the plan its dry run printed. Auto probes a shape only where the probe costs at most 2% of
the shape's cell-steps (ablate/study/pack_plan.py), so a study that shows the probe's choice needs as many:
8 cells of 410 steps at the probe's 65. ``--ladder`` runs every rung of a ladder spec's
``ablation.scales.rungs`` in turn, on the cell spec it extends with the ladder's own fields. On a machine
without a GPU the GPU lines print "not measured". Run it on an otherwise idle machine.
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from ablate.data.prepare import prepare_data  # noqa: E402
from ablate.run.pack_probe import probe_pack  # noqa: E402
from ablate.spec.experiment import flatten  # noqa: E402
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


def study_rows(spec_path: str, overrides: list[str], packs: list[str], seeds: int, max_steps: int,
               rounds: int) -> list[str]:
    """Each bound's study, timed ``rounds`` times, the bounds alternating (reversed every other round, so a
    drift of the machine falls on both), beside what its dry run estimated and planned beforehand (the
    issue's bound: the estimate within 30% of the measured time)."""
    bounds = ["1", *[b for b in packs if b != "1"]]
    walls: dict[str, list[float]] = {b: [] for b in bounds}
    planned: dict[str, tuple[float | None, str]] = {}
    failed: dict[str, str] = {}
    with tempfile.TemporaryDirectory(prefix="pack-speed-cache-") as cache:
        # The data (tokenizer, tokenized splits) prepared once, untimed, in a cache every study reads: each
        # study starts as a user's second study on the same data does. A study in a fresh folder would
        # otherwise train its tokenizer inside the timing, and under auto the dry run's probe (before the
        # timing) would already have done it: that once read --pack 1 as 7-9% slower than auto.
        shared = [*overrides, f"data.cache_dir={cache}"]
        prepare_data(load_spec(spec_path, [*shared, "tracking.enabled=false"]))
        for r in range(rounds):
            for bound in bounds if r % 2 == 0 else bounds[::-1]:
                if bound in failed:
                    continue
                wall, estimate, plan, error = _time_study(spec_path, shared, bound, seeds, max_steps)
                if error:
                    failed[bound] = error
                    continue
                walls[bound].append(wall)
                planned[bound] = (estimate, plan)
    cells = 2 * max(1, seeds // 2)
    rows = ["| --pack | cells | wall s, each round | median wall s | cells/hour | against --pack 1 "
            "| dry run's estimate | measured / estimate | the plan |", "|---" * 9 + "|"]
    base = statistics.median(walls["1"]) if walls["1"] else None
    for bound in bounds:
        if bound in failed:
            rows.append(f"| {bound} | failed: {failed[bound]} | | | | | | | |")
            continue
        wall = statistics.median(walls[bound])
        estimate, plan = planned[bound]
        shown = f"{estimate:.0f} s" if estimate else "none printed"
        ratio = f"{wall / estimate:.2f}" if estimate else ""
        against = f"{base / wall:.2f}x" if base else ""
        each = ", ".join(f"{w:.1f}" for w in walls[bound])
        rows.append(f"| {bound} | {cells} | {each} | {wall:.1f} | {cells * 3600 / wall:,.0f} | {against} "
                    f"| {shown} | {ratio} | {plan} |")
    return rows


def _time_study(spec_path: str, overrides: list[str], bound: str, seeds: int,
                max_steps: int) -> tuple[float, float | None, str, str]:
    """One study at one bound in a fresh folder: its wall time, its dry run's estimate and pack plan (the
    line for its one shape), or the error that stopped it."""
    with tempfile.TemporaryDirectory(prefix="pack-speed-") as tmp:
        folder = Path(tmp)
        path = study_spec(spec_path, seeds, max_steps, folder)
        command = [sys.executable, "-m", "ablate", "-q", "study", str(path), "--pack", bound,
                   *(f"--set={o}" for o in overrides)]
        env = {**os.environ, "PYTHONPATH": str(ROOT), "MLFLOW_TRACKING_URI": f"sqlite:///{folder / 'm.db'}"}
        env.pop("ABLATE_PACK_BOUND", None)
        dry = subprocess.run([*command, "--dry-run"], cwd=folder, env=env, capture_output=True, text=True)
        shape_line = re.compile(r"\s+\S.*: \d+ cells: ")  # "  baseline: 8 cells: one a process (...)"
        shape_lines = (line.strip() for line in dry.stdout.splitlines() if shape_line.match(line))
        plan = next(shape_lines, "")
        started = time.perf_counter()
        done = subprocess.run(command, cwd=folder, env=env, capture_output=True, text=True)
        wall = time.perf_counter() - started
        error = "" if done.returncode == 0 else " ".join(done.stderr.strip().splitlines()[-1:])
        return wall, estimated_seconds(dry.stdout), plan.replace("|", "/"), error


def ladder_rungs(ladder_path: str) -> tuple[str, list[tuple[str, list[str]]]]:
    """A ladder spec's cell and its rungs as ``--set`` overrides: the spec it extends, its own model, data,
    train and eval fields (what makes its cell differ from that spec; its ablation left out) and each rung's
    fields of ``ablation.scales.rungs``."""
    path = Path(ladder_path).resolve()
    raw = yaml.safe_load(path.read_text())
    parent = raw.get("extends")
    if not isinstance(parent, str):
        raise SystemExit(f"{ladder_path}: expected a ladder spec that extends one cell spec")
    shared = [f"{section}.{key}={_yaml_value(value)}"
              for section in ("data", "model", "train", "eval")
              for key, value in flatten(raw.get(section, {})).items()]
    rungs = (raw.get("ablation") or {}).get("scales", {}).get("rungs", {})
    if not rungs:
        raise SystemExit(f"{ladder_path}: no ablation.scales.rungs")
    own = [(name, [*shared, *(f"{k}={_yaml_value(v)}" for k, v in fields.items())])
           for name, fields in rungs.items()]
    return str(path.parent / parent), own


def _yaml_value(value: object) -> str:
    """A value as ``--set`` reads it (YAML flow style: ``[]``, ``64``, ``learned``)."""
    return yaml.safe_dump(value, default_flow_style=True).strip().removesuffix("\n...").strip()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--spec", default=str(ROOT / "experiments" / "lm-docs-cell.yaml"))
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument("--packs", nargs="+", default=["2", "4", "8"])
    parser.add_argument("--steps", type=int, default=10, help="timed steps of the step comparison")
    parser.add_argument("--study", action="store_true", help="also time a study's cells an hour")
    parser.add_argument("--seeds", type=int, default=16, help="cells of the study (two rates, half each)")
    parser.add_argument("--max-steps", type=int, default=50, help="steps of each study cell")
    parser.add_argument("--rounds", type=int, default=1, help="timed studies of each bound, alternating")
    parser.add_argument("--ladder", help="a ladder spec: each of its rungs in turn (its cell's spec and "
                        "fields; --spec ignored)")
    parser.add_argument("--rungs", nargs="+", help="only these rungs of --ladder (default: every one)")
    args = parser.parse_args()
    device = "cuda: " + torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cpu"
    configs = [("", args.spec, args.overrides)]
    if args.ladder:
        cell, rungs = ladder_rungs(args.ladder)
        configs = [(f"rung {name}", cell, [*fields, *args.overrides]) for name, fields in rungs
                   if not args.rungs or name in args.rungs]
    sizes = [int(k) for k in args.packs if k.isdigit()]  # "auto" is a study's bound, not a pack size
    for title, spec, overrides in configs:
        print(f"\n{title or 'device'}: {device}, {torch.get_num_threads()} threads; spec {spec} {overrides}")
        print("\n".join(step_rows(spec, overrides, sizes, args.steps)))
        if args.study:
            print("\n".join(study_rows(spec, overrides, args.packs, args.seeds, args.max_steps, args.rounds)))
    if not torch.cuda.is_available():
        print("GPU (cells an hour at d256 and d512, 4 layers, K = 4, 8, 16 against one cell a process and "
              "--workers-per-gpu K): not measured (no GPU here)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
