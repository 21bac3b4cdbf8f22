"""Each comparison's verdict as a reviewer reads it: decided on validation, the test split beside it on the
same seeds and at the same look, and the regime the verdict holds for.

Validation decides (the study added seeds by it). The test split is evaluated with the same paired,
repeated interval at the same look, so the two can be set side by side; whether they agree is
``ablate.stats.verdict.agrees``'s to say. The regime is read from the records: the baseline's size and
steps, who tuned the shared hyperparameters as the study recorded it (its searches, or ``ablation.tuned_on``
where the author set it; never a default), and whether the
baseline's validation loss had stopped falling (``ablation.converged`` overrides the judgement).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ablate.report.compute.comparisons import claim_questions, comparisons, decided_metric, paired_differences
from ablate.report.compute.loaded_study import Study, quality_meta
from ablate.report.compute.statistics import Effect, answer, compare
from ablate.spec import metricnames
from ablate.stats.sequential import Design, evaluate
from ablate.stats.verdict import HeldOut, Look, Verdict, agrees, held_out_reading, none_margin, read
from ablate.tracking import record
from ablate.tracking.read import metric_history

# The baseline is still learning when its validation loss fell by more than this share over its last
# evaluation interval.
STILL_FALLING = 0.01


@dataclass(frozen=True)
class OnBothSplits:
    """One variant against the baseline: the deciding validation verdict and the test split's beside it."""

    variant: str
    on_val: Verdict
    on_test: Verdict | None  # the same seeds and look on the test split; None without one
    margin: float | None = None  # what "no effect" means for this comparison (its claim's, else min_effect)

    @property
    def val(self) -> Look | None:
        return self.on_val.look

    @property
    def test(self) -> Look | None:
        return None if self.on_test is None else self.on_test.look

    @property
    def val_answer(self) -> str:
        return self.on_val.answer

    @property
    def test_answer(self) -> str | None:
        return None if self.on_test is None else self.on_test.answer

    @property
    def earlier(self) -> Look | None:
        """An earlier validation look whose effect the later seeds reopened."""
        return self.on_val.earlier

    @property
    def agrees(self) -> bool | None:
        """False where the test split flags the validation verdict, True where it agrees, else None."""
        return agrees(self.on_val, self.on_test, self.margin)

    @property
    def held_out(self) -> HeldOut | None:
        return held_out_reading(self.on_val, self.on_test, self.margin)

    def flag_words(self) -> str:
        """How a flagged test reading is said, e.g. 'the test set disagrees (worse on test, better on
        validation)'; '' when it is not flagged."""
        says = self.held_out
        if says == HeldOut.DISAGREES:
            return f"the test set disagrees ({self.test_answer} on test, {self.val_answer} on validation)"
        if says == HeldOut.UNSETTLED_EFFECT:
            return (f"the test set reads an effect validation has not settled ({self.test_answer} on test, "
                    "open on validation)")
        return ""


@dataclass(frozen=True)
class Regime:
    """What the verdicts hold for."""

    d_model: str
    layers: str
    steps: str
    params: float | None  # the baseline's parameter count
    tuned_on: str | None  # as the author stated it (ablation.tuned_on); None: not recorded
    converged: bool | None  # None: no validation history to judge by
    declared: bool  # the study declared convergence instead of it being judged
    last_drop: float | None  # the share the baseline's val loss fell over its last evaluation interval
    own_best: bool = False  # each variant has also run at its own best settings (ablation.tune)

    def text(self) -> str:
        size = f"{self.params / 1e6:.2f} M parameters, " if self.params else ""
        if self.converged is None:
            conv = "convergence not known (no validation history)"
        elif self.declared:
            conv = "converged (declared by the study)" if self.converged else "not converged (declared)"
        elif self.converged:
            conv = "converged (the baseline's val loss stopped falling)"
        else:
            conv = (f"not converged (the baseline's val loss still fell {self.last_drop:.0%} over its last "
                    "evaluation interval)")
        if self.tuned_on is not None:
            tuned = f"hyperparameters tuned on `{self.tuned_on}` (as the study states)"
        else:
            tuned = "the spec's hyperparameters (who tuned them is not recorded)"
        if self.own_best:  # these verdicts are the baseline's settings' arm; the other is stated beside it
            tuned += (" for these verdicts; each variant was also tuned by its own search, see Each variant "
                      "at its own best")
        return (f"{self.layers} layers, d_model {self.d_model} ({size}baseline), {self.steps} steps, "
                f"{tuned}, {conv}")

    def record(self) -> dict[str, object]:
        """What report.json keeps of the regime."""
        return {"text": self.text(), "converged": self.converged, "tuned_on": self.tuned_on,
                "steps": self.steps}



def test_metric(metric: str) -> str | None:
    split, _, name = metric.partition("/")
    return f"test/{name}" if split == "val" and name else None


def verdicts(study: Study, design: Design) -> list[OnBothSplits]:
    """Every comparison's deciding validation look, with the test split's look on the same seeds."""
    metric = decided_metric(study)
    _, _, higher = quality_meta(metric)
    test = test_metric(metric)
    has_test = test is not None and any(test in r.metrics for r in study.runs)
    asked = claim_questions(study)
    out = []
    for c in comparisons(study, design, metric):
        look, on_test = c.look, None
        if look is not None and has_test and test is not None:
            diffs = paired_differences(study, c.variant, test)[0][: design.looks[look.look - 1]]
            values = [math.nan if d is None else d for d in diffs]
            question, margin = asked.get(c.variant, (None, None))
            on_test = read([evaluate(values, design, look.look, question, margin, higher)], higher,
                           question=question, margin=margin)
        question, own = asked.get(c.variant, (None, None))
        out.append(OnBothSplits(c.variant, c.verdict, on_test, none_margin(question, own, design.min_effect)))
    return out


def regime(study: Study) -> Regime | None:
    """The baseline's regime (None without a baseline run)."""
    if study.baseline is None or not study.of(study.baseline):
        return None
    first = min(study.of(study.baseline), key=lambda r: r.seed)
    p = first.params
    params = [r.metrics[metricnames.MODEL_PARAMS] for r in study.of(study.baseline)
              if metricnames.MODEL_PARAMS in r.metrics]
    declared_text = study.parent["params"].get("ablation.converged", "None")
    # Only what the study recorded: a default once read 'tuned on baseline' for recipes nobody tuned there.
    tuned_on = study.record.tuned_on
    drop: float | None = None
    declared = declared_text in ("True", "False")
    if not declared:  # judged from the baseline's last evaluations
        losses = [v for _, v in metric_history(first.run_id, metricnames.VAL_LOSS)]
        if len(losses) >= 2 and losses[-2] > 0:
            drop = (losses[-2] - losses[-1]) / losses[-2]
    converged = (declared_text == "True") if declared else (None if drop is None else drop <= STILL_FALLING)
    layers = f"{p.get('model.encoder_layers', '?')}+{p.get('model.decoder_layers', '?')}"
    if p.get("model.arch") == "decoder_only":  # one stack
        layers = f"{p.get('model.decoder_layers', '?')} decoder-only"
    return Regime(p.get("model.d_model", "?"), layers, p.get("train.max_steps", "?"),
                  params[0] if params else None, tuned_on, converged, declared, drop,
                  own_best=bool(study.arms.get(record.OWN_BEST_ARM) and study.arms[record.OWN_BEST_ARM].runs))


@dataclass(frozen=True)
class HeldOutEffect:
    """A variant against the baseline on the test split of the deciding metric, by the same fixed-sample
    test at the same seeds: shown beside the validation verdict, never deciding (outside its family)."""

    variant: str
    metric: str
    effect: Effect
    answer: str


def held_out_effects(study: Study) -> list[HeldOutEffect]:
    """Each variant on ``test/<name>`` of the primary ``val/<name>`` (none without such a metric)."""
    split, _, name = study.primary.partition("/")
    metric = f"test/{name}"
    if study.baseline is None or split != "val" or not any(metric in r.metrics for r in study.runs):
        return []
    _, _, higher = quality_meta(metric)
    base = {r.seed: r.metrics[metric] for r in study.finished(study.baseline) if metric in r.metrics}
    out = []
    for v in study.variants[1:]:
        e = compare(base, {r.seed: r.metrics[metric] for r in study.finished(v) if metric in r.metrics})
        out.append(HeldOutEffect(v, metric, e, answer(e, higher)))
    return out
