"""Quality metrics: token loss / perplexity, sacreBLEU BLEU and chrF, exact match, and the steps a run took
to reach a target validation loss."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import sacrebleu

from ablate.spec import metricnames


def perplexity(loss: float) -> float:
    """exp(loss), capped so that a diverged run logs a large finite number rather than inf."""
    return math.exp(min(loss, 50.0))


def bleu(hypotheses: Sequence[str], references: Sequence[str]) -> float:
    """Corpus BLEU (sacreBLEU defaults: 13a tokenisation, detokenised input)."""
    _check_lengths(hypotheses, references)
    return float(sacrebleu.corpus_bleu(list(hypotheses), [list(references)]).score)


def chrf(hypotheses: Sequence[str], references: Sequence[str]) -> float:
    _check_lengths(hypotheses, references)
    return float(sacrebleu.corpus_chrf(list(hypotheses), [list(references)]).score)


def signatures() -> dict[str, str]:
    """sacreBLEU's signatures of `bleu` and `chrf` (one reference, their default settings), e.g.
    ``nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp|version:2.6.0``: with them a score can be recomputed
    (and compared across papers) exactly."""
    one = [["x"]]  # the signature names the reference count, known only from references
    return {"bleu": str(sacrebleu.BLEU(references=one).get_signature()),
            "chrf": str(sacrebleu.CHRF(references=one).get_signature())}


def exact_match(hypotheses: Sequence[Sequence[int]] | Sequence[str],
                references: Sequence[Sequence[int]] | Sequence[str]) -> float:
    """Fraction of sentences reproduced exactly (synthetic tasks have one right answer)."""
    _check_lengths(hypotheses, references)
    if not references:
        return 0.0
    hits = sum(1 for h, r in zip(hypotheses, references, strict=True) if list(h) == list(r))
    return hits / len(references)


def _check_lengths(hypotheses: Sequence[object], references: Sequence[object]) -> None:
    if len(hypotheses) != len(references):
        raise ValueError(f"{len(hypotheses)} hypotheses for {len(references)} references")


def steps_to_target(history: Sequence[tuple[int, Mapping[str, float]]], target: float, budget: int,
                    metric: str = metricnames.VAL_LOSS) -> float:
    """The optimizer step at which ``metric`` first reaches ``target`` (:func:`first_reach`). A run that
    never reaches it counts ``budget``, its planned steps: the value is censored at the budget, which
    understates the steps of an optimizer that misses the target (a report reads the censoring itself:
    ablate/report/compute/target_reach.py). Jordan et al.'s speedrun and Liu et al. 2025 (figure 1) count
    the steps (or tokens) to a fixed validation loss the same way."""
    reached = first_reach(history, target, metric)
    return float(budget) if reached is None else reached


def first_reach(history: Sequence[tuple[int, Mapping[str, float]]], target: float,
                metric: str = metricnames.VAL_LOSS) -> float | None:
    """The step at which ``metric`` first reaches ``target`` (at or below it), interpolated linearly between
    the two evaluations around the crossing (the step at the earlier one plus the fraction of the interval
    the loss took to fall to the target); the first evaluation's step if it is there already; None if no
    evaluation reached it."""
    previous: tuple[int, float] | None = None
    for step, metrics in history:
        value = metrics.get(metric)
        if value is None or not math.isfinite(value):
            continue
        if value <= target:
            if previous is None:
                return float(step)
            before_step, before = previous  # before > target >= value
            return before_step + (step - before_step) * (before - target) / (before - value)
        previous = (step, value)
    return None
