"""Time `ablate run` at this checkout against the previous landed main, alternating on one machine.

    python scripts/speed_vs_main.py                       # quickstart and the Multi30k cell, 2 rounds
    python scripts/speed_vs_main.py --ref 5d25e12 --rounds 3 --specs quickstart
    python scripts/speed_vs_main.py --specs quickstart --set train.max_steps=50   # checks the script

The other side is a git worktree of ``--ref`` (default: this checkout's merge-base with ``main``; on main
itself, its first parent: the main before the last merge), made in a temporary folder and removed at the end.
Each round runs every spec once at the reference and once here, in turns (reference first in odd rounds,
here first in even ones), each run a fresh ``python -m ablate run SPEC`` with tracking off in a folder of
its own side (its own data cache, so each side prepares its own data once), ``PYTHONPATH`` pointing at that
side's tree. A machine that slows down mid-run slows both sides alike; one training process at a time
(two that each use both cores run several times slower).

For each run it prints the training seconds (trained target tokens over the run's tokens/s: the optimizer
steps, without data preparation or the final evaluation; "n/a" where that side's summary has no token count),
tokens/s and the whole command's wall seconds; then per spec each side's median and best tokens/s, its spread
(fastest over slowest run), and here/reference of the medians, the bests and round by round. Multi30k needs
its files: ``$ABLATE_DATA_DIR``, else ``../shared/data/multi30k`` beside this repository. Run it on an
otherwise idle machine.

Why the best beside the median: on a shared 2-core virtual machine the same run's speed moves by up to a third
from one run to the next (six quickstart runs of one commit, 34.2k to 49.3k tokens/s, docs/benchmarks.md), in
spells that can cover a whole run, and another tenant's work only ever slows a run down. A median of 2 or 3
runs then reads the spells, not the code; the best run of each side is the estimate such noise disturbs least.
As the two runs of a round ran one after the other, the per-round ratio is the least disturbed of all, and the
last line says whether here was faster (or slower) in more rounds than chance allows: a sign test, which needs
6 rounds that agree. Short rounds (``--set train.max_steps=300``) buy more of them.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from ablate.spec import metricnames  # noqa: E402

SPECS = {"quickstart": "experiments/quickstart.yaml", "multi30k-cell": "experiments/multi30k-cell.yaml"}


@dataclass
class Timing:
    train_s: float  # target tokens / tokens per second: the training steps alone
    tokens_per_s: float
    wall_s: float  # the whole command: start-up, data, training, final evaluation


def git(*args: str, cwd: Path = REPO) -> str:
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True).stdout.strip()


def reference_commit(ref: str | None) -> str:
    """``ref`` as a commit; by default the merge-base with main, or main's first parent on main itself."""
    if ref is not None:
        return git("rev-parse", "--verify", f"{ref}^{{commit}}")
    head = git("rev-parse", "HEAD")
    base = git("merge-base", "HEAD", "main")
    return git("rev-parse", "HEAD^") if base == head else base


def run_once(tree: Path, spec: str, folder: Path, overrides: list[str]) -> Timing:
    """One fresh `ablate run` of ``tree``'s spec in ``folder``; its timing from summary.json."""
    out_dir = folder / f"runs-{time.monotonic_ns()}"
    cmd = [sys.executable, "-m", "ablate", "run", str(tree / spec), "--set", "tracking.enabled=false",
           "--set", f"train.out_dir={out_dir}", *[x for o in overrides for x in ("--set", o)]]
    env = {**os.environ, "PYTHONPATH": str(tree)}
    started = time.perf_counter()
    proc = subprocess.run(cmd, cwd=folder, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - started
    if proc.returncode != 0:
        tail = proc.stderr.strip().splitlines()[-1] if proc.stderr.strip() else ""
        raise SystemExit(f"{tree}: ablate run {spec} failed (exit {proc.returncode}): {tail}")
    (summary,) = out_dir.glob("*/*/summary.json")
    metrics = json.loads(summary.read_text())["metrics"]
    tps = float(metrics[metricnames.TOKENS_PER_S])
    tokens = metrics.get(metricnames.TRAIN_TOKENS)
    return Timing(float(tokens) / tps if tokens is not None else float("nan"), tps, wall)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--ref", help="the commit to compare against (default: the merge-base with main)")
    parser.add_argument("--rounds", type=int, default=2, help="runs of each spec on each side")
    parser.add_argument("--specs", nargs="+", default=list(SPECS), choices=list(SPECS))
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                        help="an override for every run of both sides (e.g. train.max_steps=50 to check)")
    args = parser.parse_args(argv)
    os.environ.setdefault("ABLATE_DATA_DIR", str((REPO.parent / "shared" / "data" / "multi30k").resolve()))
    commit = reference_commit(args.ref)
    dirty = " (+ uncommitted changes)" if git("status", "--porcelain", "--untracked-files=no") else ""
    print(f"here: {git('rev-parse', '--short', 'HEAD')}{dirty}; reference: {commit[:12]}; {args.rounds} "
          "rounds, alternating", flush=True)
    with tempfile.TemporaryDirectory(prefix="speed-vs-main-") as tmp:
        base = Path(tmp) / "reference"
        git("worktree", "add", "--detach", str(base), commit)
        try:
            sides = {"reference": base, "here": REPO}
            folders = {name: Path(tmp) / f"work-{name}" for name in sides}
            for folder in folders.values():
                folder.mkdir()
            times: dict[tuple[str, str], list[Timing]] = {}
            for r in range(args.rounds):
                order = list(sides) if r % 2 == 0 else list(reversed(sides))
                for spec in args.specs:
                    for name in order:
                        t = run_once(sides[name], SPECS[spec], folders[name], args.overrides)
                        times.setdefault((spec, name), []).append(t)
                        print(f"round {r + 1} {spec:14s} {name:9s}  training {seconds(t.train_s):>7s} s  "
                              f"{t.tokens_per_s:9,.0f} tokens/s  wall {t.wall_s:7.1f} s", flush=True)
        finally:
            git("worktree", "remove", "--force", str(base))
    print()
    for spec in args.specs:
        print(verdict(spec, times[spec, "reference"], times[spec, "here"]))
    return 0


@dataclass
class Side:
    """One side's runs of one spec, summarised."""

    median_tps: float
    best_tps: float
    spread: float  # fastest run's tokens/s over the slowest's: the machine's own noise on this side
    median_train_s: float  # nan where the side's summaries hold no token count


def summarise(timings: list[Timing]) -> Side:
    rates = [t.tokens_per_s for t in timings]
    return Side(statistics.median(rates), max(rates), max(rates) / min(rates),
                statistics.median(t.train_s for t in timings))


def seconds(value: float) -> str:
    return "n/a" if value != value else f"{value:.1f}"  # nan: the summary had no token count


def sign_test(faster: int, rounds: int) -> float:
    """Two-sided exact sign test: the chance of a split this uneven or more in ``rounds`` fair tosses."""
    tail = min(faster, rounds - faster)
    return min(1.0, 2 * sum(math.comb(rounds, i) for i in range(tail + 1)) / 2**rounds)


def verdict(spec: str, reference: list[Timing], here: list[Timing]) -> str:
    """The spec's lines: each side's median and best tokens/s and spread; here / reference of the medians,
    of the bests and per round (the two runs of a round ran one after the other, so a slow spell of the
    machine tends to fall on both); and whether here is faster or slower in more rounds than chance allows
    (a two-sided sign test at 5%: 6 rounds of 6 at least)."""
    ref, new = summarise(reference), summarise(here)
    paired = [h.tokens_per_s / r.tokens_per_s for r, h in zip(reference, here, strict=True)]
    faster = sum(ratio > 1 for ratio in paired)
    p = sign_test(faster, len(paired))
    if p < 0.05:
        reading = f"here is {'faster' if faster * 2 > len(paired) else 'slower'} (sign test p = {p:.3f})"
    else:
        reading = f"not resolved (sign test p = {p:.2f}): run more rounds"
    lines = [f"{spec}: median training s  reference {seconds(ref.median_train_s)}  here "
             f"{seconds(new.median_train_s)}"]
    for name, side in (("reference", ref), ("here", new)):
        lines.append(f"  {name:9s} tokens/s median {side.median_tps:9,.0f}  best {side.best_tps:9,.0f}  "
                     f"spread {side.spread:.2f}x")
    lines.append(f"  here / reference: median {new.median_tps / ref.median_tps:.3f}x, best "
                 f"{new.best_tps / ref.best_tps:.3f}x, per round {statistics.median(paired):.3f}x (median of "
                 f"{len(paired)}; here faster in {faster}); {reading}")
    return "\n".join(lines)


if __name__ == "__main__":
    raise SystemExit(main())
