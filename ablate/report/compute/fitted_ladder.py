"""A ladder study's numbers (``ablation.scales``): each variant's metric against training compute, each
comparison's gap at every rung with its verdict there, its transfer verdict, the backtest on the largest
rung, DataDecide's decision accuracy and each rung's signal-to-noise ratio.

Everything is computed with ``ablate.stats``: the fits by ``stats.ladder_law`` (a saturating power law
with 4 or more rungs, else log-linear; intervals from resampling seeds within rungs, with the rung-level
variance and a lack-of-fit test), the transfer verdicts by ``stats.transfer`` (from the measured rungs: their
verdicts, ``stats.rung_trend``'s monotone trend test, the line beside them), the rolling backtests, their
coverage and reach, and each comparison's decision accuracy and signal-to-noise with their intervals by
``stats.backtest``, the pairs by ``stats.pairing`` (a diverged cell counted against its side, as
everywhere) and the per-rung verdicts by ``stats.verdict.fixed_reading``. The verdicts of every rung are
one family: each comparison at each rung is tested at the study's alpha with Holm's correction over all of
them, its interval drawn at ``1 - alpha / family`` (Bonferroni); a transfer verdict reads its rungs' signs
from those verdicts. The transfer verdicts are a family of their own (one per comparison): their trend
tests Holm-corrected together at the study's alpha, their intervals each at ``alpha / comparisons``.

Compute is measured: a rung's compute is the mean ``train/flops`` of its runs (the baseline's for a gap,
each variant's own for its curve), the planned compute of the parent's ``ablate.scales`` tag where a run
did not log one.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ablate.report.compute.comparisons import decided_metric, family_of, pairs_with_divergence
from ablate.report.compute.loaded_study import Study, quality_meta
from ablate.spec import metricnames
from ablate.stats import backtest, ladder_law, transfer
from ablate.stats.backtest import Backtest, Coverage, Interval
from ablate.stats.fixed_sample import compare_differences
from ablate.stats.ladder_law import Fit
from ablate.stats.multiplicity import holm
from ablate.stats.rung_trend import monotone_trend
from ablate.stats.transfer import Estimate, Transfer, TransferVerdict
from ablate.stats.verdict import ALPHA, Fixed, fixed_reading

# The statistics floor's vocabulary the ladder's section renders (sections import no stats).
__all__ = ["AtRung", "Backtest", "ComparisonLadder", "Coverage", "Curve", "Estimate", "Fit", "Fixed",
           "Interval", "Ladder", "RungInfo", "Transfer", "TransferVerdict", "as_record", "ladder_of"]


@dataclass(frozen=True)
class RungInfo:
    """One rung as it ran: its baseline's measured compute, size and tokens, and its signal and noise."""

    name: str
    compute: float  # the baseline's mean train/flops (planned where no run logged it)
    params: float  # the baseline's parameters without embeddings
    tokens: float
    planned: float | None  # the planned compute of the parent's tag
    seeds: int  # the baseline's finished runs
    signal: float  # the largest difference between the variants' means
    noise: float  # the pooled sd of seeds within variants
    snr: float

    def as_dict(self) -> dict[str, object]:
        return {"name": self.name, "compute": self.compute, "params": self.params, "tokens": self.tokens,
                "planned": self.planned, "seeds": self.seeds, "signal": self.signal, "noise": self.noise,
                "snr": self.snr}


@dataclass(frozen=True)
class AtRung:
    """One comparison at one rung: its paired effect, its interval at the family's Bonferroni level, its
    Holm-adjusted p and the verdict that gives."""

    rung: str
    diff: float
    lo: float
    hi: float
    p: float
    p_holm: float
    n: int
    verdict: Fixed
    diverged_pairs: int = 0
    p_min: float = 0.0  # the smallest p its test can give (a permutation test on 2-3 pairs)
    identical: bool = False  # every pair exactly equal

    def as_dict(self) -> dict[str, object]:
        return {"rung": self.rung, "diff": self.diff, "lo": self.lo, "hi": self.hi, "p": self.p,
                "p_holm": self.p_holm, "pairs": self.n, "verdict": self.verdict.value,
                "diverged_pairs": self.diverged_pairs}


@dataclass
class Curve:
    """One variant's points and fits: on every rung, and without the largest (the backtest's); the fitted
    curve and its band at the ladder's ``grid`` of compute (what the ladder figure draws)."""

    variant: str
    points: list[ladder_law.Rung]  # per rung (in order), the variant's own compute and seeds' values
    fit: ladder_law.Fit | None
    without_top: ladder_law.Fit | None
    line: list[float] = field(default_factory=list)  # the fit at each grid point (NaN without a fit)
    lo: list[float] = field(default_factory=list)
    hi: list[float] = field(default_factory=list)


@dataclass
class ComparisonLadder:
    """One comparison over the ladder."""

    variant: str
    gaps: list[transfer.GapRung]
    at_rungs: list[AtRung]
    verdict: transfer.TransferVerdict | None = None
    backtests: list[Backtest] = field(default_factory=list)  # rolling origin, in order of origin
    accuracy: Interval = Interval(math.nan, math.nan, math.nan)  # its decision accuracy
    snr: list[Interval] = field(default_factory=list)  # its signal-to-noise at each rung

    @property
    def backtest(self) -> Backtest | None:
        """The backtest on the largest rung (the last origin)."""
        return self.backtests[-1] if self.backtests else None


@dataclass
class Ladder:
    metric: str
    unit: str
    decimals: int
    higher: bool
    alpha: float
    rungs: list[RungInfo]
    curves: list[Curve]
    comparisons: list[ComparisonLadder]
    accuracy: list[float]  # DataDecide's decision accuracy of each rung but the largest
    target: float | None
    margin: float | None
    family: int  # the per-rung verdicts' family: comparisons x rungs
    grid: list[float] = field(default_factory=list)  # compute the curves are drawn at
    notes: list[str] = field(default_factory=list)
    coverage: Coverage | None = None  # the rolling backtests' over every comparison

    @property
    def mean_accuracy(self) -> float:
        """DataDecide's decision accuracy over every smaller rung (NaN without one)."""
        found = [a for a in self.accuracy if math.isfinite(a)]
        return float(np.mean(found)) if found else math.nan

    @property
    def band_level(self) -> float:
        fits = [c.fit for c in self.curves if c.fit is not None]
        return fits[0].level if fits else ladder_law.LEVEL

    @property
    def transfer_level(self) -> float:
        return 1.0 - self.alpha / max(1, len(self.comparisons))

    @property
    def span(self) -> float:
        return self.rungs[-1].compute / self.rungs[0].compute if self.rungs else math.nan


def _mean_metric(runs: list[Any], key: str) -> float:
    values = [r.metrics[key] for r in runs if key in r.metrics and math.isfinite(r.metrics[key])]
    return float(np.mean(values)) if values else math.nan


def _rung_compute(rung: Study, variant: str, planned: float | None) -> float:
    value = _mean_metric(rung.finished(variant) or rung.of(variant), metricnames.TRAIN_FLOPS)
    return value if math.isfinite(value) else (planned if planned is not None else math.nan)


def ladder_of(study: Study) -> Ladder | None:
    """The ladder's numbers, None for a study without rungs."""
    if not study.rungs or study.baseline is None:
        return None
    ladder = study.record.ladder
    if ladder is None:
        return None
    planned = ladder.planned_flops()
    metric = decided_metric(study)
    unit, dec, higher = quality_meta(metric)
    alpha = float(study.parent["params"].get("ablation.alpha", ALPHA))
    names = list(study.rungs)
    variants = list(study.variants)
    labels = variants[1:]
    rungs = [_rung_info(study.rungs[n], n, planned.get(n), metric, variants) for n in names]
    curves = [_curve(study, v, names, planned, metric) for v in variants]
    family = family_of(study)
    comparisons = [_comparison(study, v, names, rungs, metric, alpha, family) for v in labels]
    _holm_over_ladder(comparisons, higher, alpha)
    margin = ladder.margin
    target = ladder.target
    _transfer_family(comparisons, alpha, margin, target)
    _per_comparison(comparisons, curves)
    means = {c.variant: [p.mean for p in c.points] for c in curves}
    grid = _grid(rungs, target)
    for c in curves:
        _draw(c, grid)
    tests = [b for c in comparisons for b in c.backtests]
    return Ladder(metric, unit, dec, higher, alpha, rungs, curves, comparisons,
                  transfer.decision_accuracy(means), target, None if margin is None else float(margin),
                  family, list(grid),
                  coverage=backtest.coverage(tests, 1.0 - alpha / max(1, len(comparisons))))


GRID_POINTS = 60


def _grid(rungs: list[RungInfo], target: float | None) -> np.ndarray:
    """Compute from below the smallest rung to beyond the largest (and the target)."""
    lo = rungs[0].compute / 1.5
    hi = max(rungs[-1].compute * 1.5, (target or 0.0) * 1.2)
    return np.geomspace(lo, hi, GRID_POINTS)


def _draw(c: Curve, grid: np.ndarray) -> None:
    if c.fit is None:
        c.line = c.lo = c.hi = [math.nan] * len(grid)
        return
    lo, hi = c.fit.band(grid)
    c.line, c.lo, c.hi = list(c.fit.predict(grid)), list(lo), list(hi)


def _rung_info(rung: Study, name: str, planned: float | None, metric: str, variants: list[str]) -> RungInfo:
    base = rung.baseline or variants[0]
    done = rung.finished(base)
    values = {v: [r.metrics[metric] for r in rung.finished(v) if metric in r.metrics] for v in variants}
    signal, noise, snr = transfer.signal_to_noise(values)
    return RungInfo(name, _rung_compute(rung, base, planned),
                    _mean_metric(done, metricnames.NON_EMBEDDING_PARAMS),
                    _mean_metric(done, metricnames.TRAIN_TOKENS), planned, len(done), signal, noise, snr)


def _curve(study: Study, variant: str, names: list[str], planned: dict[str, float], metric: str) -> Curve:
    points = []
    for n in names:
        rung = study.rungs[n]
        runs = sorted((r for r in rung.finished(variant) if metric in r.metrics
                       and math.isfinite(r.metrics[metric])), key=lambda r: r.seed)
        points.append(ladder_law.Rung(_rung_compute(rung, variant, planned.get(n)),
                                   tuple(r.metrics[metric] for r in runs), tuple(r.seed for r in runs)))
    fit = ladder_law.fit(points)
    without = ladder_law.fit(points[:-1]) if len(points) > 2 else None
    return Curve(variant, points, fit, without)


def _comparison(study: Study, variant: str, names: list[str], rungs: list[RungInfo], metric: str,
                alpha: float, family: int) -> ComparisonLadder:
    gaps, at = [], []
    for name, info in zip(names, rungs, strict=True):
        rung = study.rungs[name]
        ran = variant in rung.variants
        diffs, diverged = pairs_with_divergence(rung, variant, metric) if ran else ([], 0)
        finite = tuple(d for d in diffs if d is not None and math.isfinite(d))
        gaps.append(transfer.GapRung(name, info.compute, finite))
        e = compare_differences(finite, 1.0 - alpha / family) if finite else None
        if e is None:
            at.append(AtRung(name, math.nan, math.nan, math.nan, math.nan, math.nan, 0, Fixed.NO_RUNS))
            continue
        at.append(AtRung(name, float(np.mean(finite)), e.lo, e.hi, e.p, math.nan, len(finite), Fixed.NO_RUNS,
                         diverged, e.p_min, e.identical))
    return ComparisonLadder(variant, gaps, at)


def _transfer_family(comparisons: list[ComparisonLadder], alpha: float, margin: float | None,
                     target: float | None) -> None:
    """Each comparison's rolling backtests and transfer verdict: its rungs' signs from their verdicts in
    the ladder's family, its trend test Holm-corrected over the comparisons, its prediction no farther
    than its backtests reached."""
    share = alpha / max(1, len(comparisons))
    lines = [transfer.fit_line(c.gaps) for c in comparisons]
    ps = [monotone_trend([g.differences for g in line.rungs], line.tau2).p if line is not None else math.nan
          for line in lines]
    adjusted = holm(ps)
    for c, p in zip(comparisons, adjusted, strict=True):
        c.backtests = backtest.rolling(c.gaps, share)
        signs = {a.rung: (int(np.sign(a.diff)) if a.verdict in (Fixed.BETTER, Fixed.WORSE) else 0)
                 for a in c.at_rungs}
        c.verdict = transfer.transfer(c.gaps, share, margin, target, signs, p, alpha,
                                      backtest.reach(c.backtests))


def _per_comparison(comparisons: list[ComparisonLadder], curves: list[Curve]) -> None:
    """Each comparison's decision accuracy and signal-to-noise at every rung, with bootstrap intervals
    (seeds paired between the variant and the baseline, whose curve is the first)."""
    base = curves[0]
    by_variant = {c.variant: c for c in curves}
    for c in comparisons:
        c.accuracy = backtest.decision_accuracy([g.differences for g in c.gaps if g.n])
        mine = by_variant[c.variant]
        c.snr = []
        for b, v in zip(base.points, mine.points, strict=True):
            paired = sorted(set(b.seeds) & set(v.seeds))
            bv = dict(zip(b.seeds, b.values, strict=True))
            vv = dict(zip(v.seeds, v.values, strict=True))
            c.snr.append(backtest.signal_to_noise([bv[s] for s in paired], [vv[s] for s in paired]))


def _holm_over_ladder(comparisons: list[ComparisonLadder], higher: bool, alpha: float) -> None:
    """Holm's correction over every comparison at every rung (one family), and each one's verdict."""
    cells = [(c, i) for c in comparisons for i in range(len(c.at_rungs))]
    ps = [c.at_rungs[i].p for c, i in cells]
    tested = [k for k, p in enumerate(ps) if math.isfinite(p)]
    adjusted = holm([ps[k] for k in tested])
    by_cell = dict(zip(tested, adjusted, strict=True))
    for k, (c, i) in enumerate(cells):
        a = c.at_rungs[i]
        p_holm = by_cell.get(k, math.nan)
        reading = fixed_reading(a.diff, p_holm, a.p_min, a.identical, higher, alpha)  # no pairs: NaN diff
        c.at_rungs[i] = dataclasses.replace(a, p_holm=p_holm, verdict=reading)


def as_record(ladder: Ladder) -> dict[str, object]:
    """What report.json keeps of the ladder."""
    return {
        "metric": ladder.metric, "alpha": ladder.alpha, "family": ladder.family, "target": ladder.target,
        "margin": ladder.margin, "span": ladder.span, "transfer_level": ladder.transfer_level,
        "rungs": [r.as_dict() for r in ladder.rungs],
        "decision_accuracy": {r.name: a for r, a in zip(ladder.rungs, ladder.accuracy, strict=False)},
        "fits": {c.variant: {"all": None if c.fit is None else c.fit.as_dict(),
                             "without_largest": None if c.without_top is None else c.without_top.as_dict(),
                             "points": [{"compute": p.compute, "values": list(p.values),
                                         "seeds": list(p.seeds)} for p in c.points]}
                 for c in ladder.curves},
        "comparisons": {c.variant: {"at_rungs": [a.as_dict() for a in c.at_rungs],
                                    "transfer": None if c.verdict is None else c.verdict.as_dict(),
                                    "backtests": [b.as_dict() for b in c.backtests],
                                    "decision_accuracy": c.accuracy.as_dict(),
                                    "signal_to_noise": {r.name: s.as_dict() for r, s in
                                                        zip(ladder.rungs, c.snr, strict=False)}}
                        for c in ladder.comparisons},
        "backtest_coverage": None if ladder.coverage is None else ladder.coverage.as_dict(),
    }
