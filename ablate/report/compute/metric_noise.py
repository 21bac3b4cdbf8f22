"""How far each metric's differences between variants stand above its seed-to-seed noise, at each scale:
the signal-to-noise ratio of Heineman et al. 2025 ("Signal and Noise: A Framework for Reducing Uncertainty
in Language Model Evaluation", section 2), with seeds as the noise.

For a metric at one scale (a study's only scale, or each rung of a ladder): the signal is the spread of the
variants' mean scores over their finished seeds (largest minus smallest mean), the noise the pooled
standard deviation across seeds within a variant (the root of the mean of the variants' sample variances,
variants with at least two seeds), and SNR = signal / noise. The paper divides both by the mean score
(relative dispersion); the ratio is the same. Computed for the loss the study reads (``val/loss``, and
``val/bpb`` where logged) and for every downstream task's score (``downstream/<task>/acc``, ``acc_norm``,
``bpb``: ablate/run/downstream.py), so that a reader sees which metric can tell these variants apart at
this scale. A description of the runs, not a verdict: the verdicts are the stats floor's.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass

from ablate.report.compute.loaded_study import Study
from ablate.spec import metricnames

LOSSES = (metricnames.VAL_LOSS, metricnames.VAL_BPB)


@dataclass(frozen=True)
class MetricNoise:
    """One metric at one scale: the variants' means, the spread between them and the seeds' noise."""

    metric: str
    scale: str  # the rung's name; "" for a study of one scale
    means: dict[str, float]  # per variant, over its finished seeds
    seeds: int  # the fewest finished seeds of a variant that counts
    signal: float
    noise: float | None  # None with fewer than two seeds in every variant

    @property
    def snr(self) -> float | None:
        if self.noise is None or self.noise == 0 or math.isnan(self.noise):
            return None
        return self.signal / self.noise


def downstream_metrics(study: Study) -> list[str]:
    """The downstream task scores any finished run of the study holds, sorted."""
    found = {m for r in study.runs if r.status == "finished"
             for m in r.metrics if metricnames.is_downstream(m)}
    return sorted(found)


def noise_of(study: Study, metric: str, scale: str = "") -> MetricNoise | None:
    """``metric``'s signal and noise over the finished runs of ``study`` (None: fewer than two variants)."""
    values: dict[str, list[float]] = {}
    for r in study.runs:
        if r.status == "finished" and metric in r.metrics and not math.isnan(r.metrics[metric]):
            values.setdefault(r.variant, []).append(float(r.metrics[metric]))
    if len(values) < 2:
        return None
    means = {v: statistics.fmean(xs) for v, xs in values.items()}
    spread = [statistics.variance(xs) for xs in values.values() if len(xs) >= 2]
    noise = math.sqrt(statistics.fmean(spread)) if spread else None
    return MetricNoise(metric, scale, means, min(len(xs) for xs in values.values()),
                       max(means.values()) - min(means.values()), noise)


def metric_noise(study: Study) -> list[MetricNoise]:
    """Every loss and downstream metric at every scale of the study (empty without downstream scores)."""
    downstream = downstream_metrics(study)
    if not downstream:
        return []
    scales = list(study.rungs.items()) if study.rungs else [("", study)]
    out = []
    for metric in [*LOSSES, *downstream]:
        for name, part in scales:
            found = noise_of(part, metric, name)
            if found is not None:
                out.append(found)
    return out
