"""How much weight averaging cuts the seed noise of a study's metric, paired within runs.

    python scripts/averaging_noise.py averaging-noise-multi30k [--metric val/bleu] [--variant positions=rope]

Reads the study's cells back from MLflow (``ablate.tracking.read``; the tracking store of the working
directory, or MLFLOW_TRACKING_URI) and, for every seed where both the baseline and the variant finished,
takes each run's two readings of the metric: the best checkpoint's (``val/bleu``) and the averaged
weights' (``val/averaged/bleu``, train.weight_average). It prints:

- the seed sd (n - 1) of the metric for each variant, without and with averaging;
- the sd of the paired difference variant - baseline, without and with averaging (the noise a paired
  comparison of the two works against);
- the ratio of the paired sds (with / without) with a 95% interval.

The two sds come from the same seeds, so they are correlated and an F interval for independent variances
would be too wide or too narrow. The interval is Pitman-Morgan's (Pitman 1939, Morgan 1939), exact for
paired normal data: var(X)/var(Y) = theta exactly when X + sqrt(theta) Y and X - sqrt(theta) Y are
uncorrelated, and inverting that correlation's t test (n - 2 df) gives theta in
F * [K - sqrt(K^2 - 1), K + sqrt(K^2 - 1)], K = 1 + 2 (1 - r^2) t^2 / (n - 2), with F = s_X^2 / s_Y^2 and r
their correlation; the sd ratio's interval is its square root. A percentile bootstrap over seeds (the
seeds resampled with their pairs) is printed beside it as a check that leans on no normality; with 8 seeds
it is rough, and narrower than it should be.
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
from scipy import stats

from ablate.tracking import record


@dataclass(frozen=True)
class Paired:
    """One seed's four readings: (baseline, variant) x (plain, averaged)."""

    seed: int
    base_plain: float
    base_avg: float
    var_plain: float
    var_avg: float

    @property
    def diff_plain(self) -> float:
        return self.var_plain - self.base_plain

    @property
    def diff_avg(self) -> float:
        return self.var_avg - self.base_avg


def sd(values: Sequence[float]) -> float:
    """The sample standard deviation (n - 1); NaN below two values."""
    return float(np.std(values, ddof=1)) if len(values) > 1 else math.nan


def pitman_morgan_sd_ratio(x: Sequence[float], y: Sequence[float],
                           level: float = 0.95) -> tuple[float, float, float]:
    """sd(x) / sd(y) for paired samples and its Pitman-Morgan interval at ``level`` (see the module's
    docstring): (ratio, low, high)."""
    n = len(x)
    if n != len(y) or n < 3:
        raise ValueError("paired samples of at least 3 are needed")
    f = float(np.var(x, ddof=1) / np.var(y, ddof=1))
    r = float(np.corrcoef(x, y)[0, 1])
    t = float(stats.t.ppf(0.5 + level / 2, n - 2))
    k = 1 + 2 * (1 - r * r) * t * t / (n - 2)
    spread = math.sqrt(max(k * k - 1, 0.0))
    return math.sqrt(f), math.sqrt(f * (k - spread)), math.sqrt(f * (k + spread))


def bootstrap_sd_ratio(x: Sequence[float], y: Sequence[float], level: float = 0.95, draws: int = 10_000,
                       seed: int = 0) -> tuple[float, float]:
    """A percentile bootstrap interval of sd(x) / sd(y), resampling the pairs (seeds) together."""
    xs, ys = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    rng = np.random.default_rng(seed)
    picks = rng.integers(0, len(xs), size=(draws, len(xs)))
    sx, sy = xs[picks].std(axis=1, ddof=1), ys[picks].std(axis=1, ddof=1)
    ratios = sx[sy > 0] / sy[sy > 0]  # a resample of one repeated seed has no spread
    low, high = np.quantile(ratios, [0.5 - level / 2, 0.5 + level / 2])
    return float(low), float(high)


def paired_readings(runs: Iterable[Mapping[str, object]], metric: str, baseline: str,
                    variant: str) -> list[Paired]:
    """The seeds where both variants finished with both readings, from run records {variant, seed, status,
    metrics} (metrics under their result names, e.g. 'val/bleu' and 'val/averaged/bleu')."""
    plain, avg = record.plain(metric), record.averaged(metric)
    found: dict[tuple[str, int], Mapping[str, float]] = {}
    for run in runs:
        metrics = run["metrics"]
        assert isinstance(metrics, Mapping)
        if run["status"] == "finished" and plain in metrics and avg in metrics:
            found[(str(run["variant"]), int(str(run["seed"])))] = metrics
    seeds = sorted({s for v, s in found if v == baseline} & {s for v, s in found if v == variant})
    return [Paired(s, found[(baseline, s)][plain], found[(baseline, s)][avg], found[(variant, s)][plain],
                   found[(variant, s)][avg]) for s in seeds]


def read_runs(study: str) -> list[dict[str, object]]:
    """The study's cells as {variant, seed, status, metrics}: superseded cells left out, and of a cell run
    more than once the latest finished run (else the latest)."""
    from ablate.tracking.read import find_study_runs, tags_and_params

    _, frame = find_study_runs(study)
    records = sorted(frame.to_dict("records"),
                     key=lambda rec: (rec.get(f"tags.{record.STATUS}") == "finished", rec["start_time"]))
    cells: dict[tuple[str, str], dict[str, object]] = {}
    for rec in records:  # a later record (finished, then newer) replaces an earlier one of its cell
        tags, _ = tags_and_params(rec)
        if tags.get(record.KIND) != "cell" or tags.get(record.SUPERSEDED):
            continue
        metrics = record.result_metrics({k[len("metrics."):]: float(v) for k, v in rec.items()
                                    if k.startswith("metrics.") and v == v})  # v == v: not NaN
        variant, seed = tags.get(record.VARIANT, "?"), tags.get(record.SEED, "0")
        cells[(variant, seed)] = {"variant": variant, "seed": seed, "status": tags.get(record.STATUS, ""),
                                  "metrics": metrics}
    return list(cells.values())


def report(pairs: Sequence[Paired], metric: str, baseline: str, variant: str, draws: int = 10_000) -> str:
    """The figures as text (see the module's docstring)."""
    n = len(pairs)
    if n < 3:
        return f"{n} paired seed(s) with both readings: at least 3 are needed"
    rows = [f"{n} seeds ({', '.join(str(p.seed) for p in pairs)}); metric {record.plain(metric)}, without "
            f"averaging (best checkpoint) and with ({record.averaged(metric)})",
            f"{'':34} {'without':>9} {'with':>9} {'with/without':>13}"]
    diff = f"sd of {variant} - {baseline}"
    columns = {f"seed sd, {baseline}": ([p.base_plain for p in pairs], [p.base_avg for p in pairs]),
               f"seed sd, {variant}": ([p.var_plain for p in pairs], [p.var_avg for p in pairs]),
               diff: ([p.diff_plain for p in pairs], [p.diff_avg for p in pairs])}
    for label, (without, with_) in columns.items():
        rows.append(f"{label:34} {sd(without):9.3f} {sd(with_):9.3f} {sd(with_) / sd(without):13.3f}")
    diff_without, diff_with = columns[diff]
    ratio, low, high = pitman_morgan_sd_ratio(diff_with, diff_without)
    b_low, b_high = bootstrap_sd_ratio(diff_with, diff_without, draws=draws)
    rows += [f"mean {variant} - {baseline}: {np.mean(diff_without):+.3f} without, {np.mean(diff_with):+.3f} "
             "with averaging",
             f"paired sd ratio (with / without) {ratio:.3f}: 95% interval [{low:.3f}, {high:.3f}] "
             f"(Pitman-Morgan, paired normal, {n - 2} df); percentile bootstrap over seeds "
             f"[{b_low:.3f}, {b_high:.3f}] ({draws} draws)"]
    return "\n".join(rows)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("study", nargs="?", default="averaging-noise-multi30k")
    parser.add_argument("--metric", default="val/bleu", help="the plain reading's name (default val/bleu)")
    parser.add_argument("--baseline", default="baseline")
    parser.add_argument("--variant", default="positions=rope")
    parser.add_argument("--draws", type=int, default=10_000, help="bootstrap draws")
    args = parser.parse_args(argv)
    pairs = paired_readings(read_runs(args.study), args.metric, args.baseline, args.variant)
    print(report(pairs, args.metric, args.baseline, args.variant, args.draws))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
