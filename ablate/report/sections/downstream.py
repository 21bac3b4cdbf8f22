"""The report's "Downstream tasks" section, for a language-model study whose runs scored
lm-evaluation-harness tasks (``eval.downstream``): each task's scores beside the loss, per variant, with
each metric's signal-to-noise ratio across seeds at each scale (ablate/report/compute/metric_noise.py), so
that a reader sees which metric can tell these variants apart at this scale (Heineman et al. 2025;
DataDecide, Magnusson et al. 2025, on accuracy against bits per byte at small scale)."""

from __future__ import annotations

from ablate.report.compute.metric_noise import MetricNoise, metric_noise
from ablate.report.render import Block, Para, Section, Table
from ablate.report.section_api import Inputs, Part, section


def _number(value: float | None, digits: int = 4) -> str:
    return "—" if value is None else f"{value:.{digits}g}"


@section(85)  # beside the main table
def part(inp: Inputs) -> Part | None:
    """``data['downstream']``: per metric and scale, the variants' means, signal, noise and SNR."""
    rows_ = metric_noise(inp.study)
    if not rows_:
        return None
    variants = [v for v in inp.study.variants if any(v in r.means for r in rows_)]
    ladder = any(r.scale for r in rows_)
    head = ["metric", *(["rung"] if ladder else []), *variants, "signal", "noise", "SNR", "seeds"]
    rows = [[f"`{r.metric}`", *([r.scale] if ladder else []),
             *(_number(r.means.get(v)) for v in variants),
             _number(r.signal, 3), _number(r.noise, 3), _number(r.snr, 3), str(r.seeds)] for r in rows_]
    blocks: list[Block] = [
        Para("Each metric's mean over the finished seeds of every variant: the loss the study trains on and "
             "each lm-evaluation-harness task's accuracy (acc), length-normalised accuracy (acc_norm) and "
             "the "
             "correct continuation's bits per byte (bpb). Signal: the largest minus the smallest variant "
             "mean; noise: the pooled standard deviation across seeds within a variant; SNR = signal / noise "
             "(Heineman et al. 2025, \"Signal and Noise\", with seeds as the noise). A metric whose SNR is "
             "near 1 moves between seeds as much as between variants at this scale: deciding on it needs "
             "many more seeds than a metric whose SNR is far above 1."),
        Table(head, rows, "l" + ("l" if ladder else "") + "r" * (len(variants) + 4), "Downstream tasks"),
    ]
    data = {"downstream": [_record(r) for r in rows_]}
    return Part("downstream", [Section("Downstream tasks", blocks)], data=data)


def _record(r: MetricNoise) -> dict[str, object]:
    return {"metric": r.metric, "scale": r.scale or None, "means": r.means, "signal": r.signal,
            "noise": r.noise, "snr": r.snr, "seeds": r.seeds}
