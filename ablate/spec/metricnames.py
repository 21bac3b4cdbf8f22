"""The metric names a run produces, in one place: what a spec may name as a target, and which way is better.

- At each evaluation (ablate/engine/trainer.py ``run_evaluation`` -> ablate/engine/evaluate.py
  ``evaluate``): ``val/loss``,
  ``val/ppl`` and, when it decodes (``eval.bleu_during_training``), ``val/bleu`` + ``val/chrf`` on text
  data or ``val/exact_match`` on a synthetic task. Early stopping and the tuner's pruning read these.
- Every few training steps: ``train/loss``, ``train/lr``, ``train/tokens_per_s`` (MLflow only).
- A run's result (ablate/run/runner.py: what a study compares and a search optimises): the best checkpoint's
  ``val/*`` and ``test/*`` (every split decoded, test when the data has a test split), ``model/params``,
  ``train/tokens_per_s``, ``data/padding_fraction``, ``train/wall_time_s``, ``train/cpu_time_s`` (the
  process's CPU time, every thread), ``peak_memory_mb`` and ``run_memory_mb`` (the run's own footprint
  above the process's memory at its start), and its training compute (ablate/engine/compute.py):
  ``model/params_non_embedding``, ``train/tokens`` and ``train/flops``. MLflow
  holds the result under ``final/`` names (``final/val/bleu``) beside the training-time curves, and the
  constants ``model/params`` and ``data/padding_fraction`` once, at step 0 (ablate/tracking/record.py).
- A decoder-only language model (``model.arch: decoder_only``, ablate/engine/lm_eval.py) decodes nothing:
  each evaluation measures ``val/loss``, ``val/ppl`` and ``val/bpb`` (bits per byte: the summed negative
  log-likelihood in bits over the UTF-8 bytes of the text, comparable across tokenizers), and with
  ``eval.lengths`` the perplexity at each evaluation length, ``val/ppl_at_<n>`` (non-overlapping windows)
  and ``val/ppl_at_<n>_sliding`` (sliding windows, with ``eval.sliding_stride``).
- With ``eval.target_loss``, a run's result also holds ``val/steps_to_target``: the step at which the
  evaluations' ``val/loss`` first reached the target (interpolated between evaluations; a run that never
  reaches it counts its whole budget), the deciding metric of "reaches the loss in fewer steps" claims.
- With ``eval.downstream`` (a language model, ablate/run/downstream.py), a run's result also holds each
  lm-evaluation-harness task's scores on the best checkpoint: ``downstream/<task>/acc`` and
  ``downstream/<task>/acc_norm`` (the harness's accuracy and length-normalised accuracy) and
  ``downstream/<task>/bpb`` (the correct continuation's bits per byte, DataDecide's measure). They have no
  test counterpart: a verdict on one is read on validation alone.
- With ``train.weight_average`` (ablate/engine/averaging.py), a run's result also holds the averaged
  weights' reading of every val/test metric under the `AVERAGED` marker: ``val/averaged/bleu``,
  ``test/averaged/chrf``, ``val/averaged/loss`` (MLflow: ``final/val/averaged/bleu``), beside the best
  checkpoint's ``val/bleu``, so the two readings are paired within each run. The averaged reading is the
  one a study decides on by default (``ablation.metric: auto``); naming the plain one decides on it.
  The marker sits between split and name, so ``test/...`` follows from ``val/...`` as for the plain
  names, and the name's last part still says which way is better.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable
from typing import Any, Literal

# ---------------------------------------------------------------- every metric name, declared once
# Everywhere else reads these (tests/test_layout.py fails on a metric name written inline).
TRAIN_LOSS = "train/loss"
TRAIN_LR = "train/lr"
TOKENS_PER_S = "train/tokens_per_s"  # per logging window during training; final/ = the whole run's
WALL_TIME = "train/wall_time_s"  # the run's result only: final/train/wall_time_s
CPU_TIME = "train/cpu_time_s"  # the run's process CPU time over all its segments (every thread)
MODEL_PARAMS = "model/params"  # logged once, at step 0
# a decoder-only model's KV cache per decoded token (bytes, fp32; model.kv_heads), logged once at step 0
KV_CACHE = "model/kv_cache_bytes_per_token"
# Training compute (ablate/engine/compute.py, Kaplan et al. 2020): the parameters without embeddings (logged
# once, at step 0), the tokens the run trained on and its FLOPs (the run's result: final/train/flops)
NON_EMBEDDING_PARAMS = "model/params_non_embedding"
TRAIN_TOKENS = "train/tokens"
TRAIN_FLOPS = "train/flops"
PADDING = "data/padding_fraction"  # logged once, at step 0
VOCAB_SIZE = "data/vocab_size"  # the tokens the model embeds and predicts (a tokenizer file's own), at step 0
PEAK_MEMORY = "peak_memory_mb"  # at each evaluation; final/ = the whole run's peak
RUN_MEMORY = "run_memory_mb"  # the run's own footprint: its peak above the process's memory at its start
VAL_LOSS, VAL_PPL, VAL_BPB = "val/loss", "val/ppl", "val/bpb"
VAL_BLEU, VAL_CHRF, VAL_EXACT_MATCH = "val/bleu", "val/chrf", "val/exact_match"
TEST_LOSS, TEST_BPB = "test/loss", "test/bpb"
TEST_BLEU, TEST_CHRF, TEST_EXACT_MATCH = "test/bleu", "test/chrf", "test/exact_match"
# the step at which val/loss first reached eval.target_loss (interpolated; censored at the run's budget)
VAL_STEPS_TO_TARGET = "val/steps_to_target"

SPLIT_METRICS = ("loss", "ppl")  # teacher-forced, always computed
TEXT_METRICS = ("bleu", "chrf")  # sacrebleu on detokenized text (files and hub data)
SYNTHETIC_METRICS = ("exact_match",)  # token sequences of a synthetic task
LM_METRICS = ("loss", "ppl", "bpb")  # a language model's evaluation (no decoding)
TRAINING_METRICS = (TRAIN_LOSS, TRAIN_LR, TOKENS_PER_S)
RUN_METRICS = (MODEL_PARAMS, TOKENS_PER_S, PADDING, WALL_TIME, CPU_TIME, PEAK_MEMORY, RUN_MEMORY,
               NON_EMBEDDING_PARAMS, TRAIN_TOKENS, TRAIN_FLOPS)
_HIGHER_IS_BETTER = ("bleu", "chrf", "exact_match", "tokens_per_s", "acc", "acc_norm")
DOWNSTREAM = "downstream"  # an lm-evaluation-harness task's scores: downstream/<task>/acc
DOWNSTREAM_METRICS = ("acc", "acc_norm", "bpb")
AVERAGED = "averaged"  # the averaged weights' reading: val/averaged/bleu (train.weight_average)


def averaged(metric: str) -> str:
    """The averaged weights' reading of a val/test metric: 'val/bleu' -> 'val/averaged/bleu' (idempotent)."""
    if is_averaged(metric):
        return metric
    split, _, name = metric.partition("/")
    return f"{split}/{AVERAGED}/{name}"


def is_averaged(metric: str) -> bool:
    """Whether ``metric`` is an averaged-weights reading ('val/averaged/bleu')."""
    return metric.split("/")[1:2] == [AVERAGED]


def plain(metric: str) -> str:
    """The best checkpoint's reading of a metric: 'val/averaged/bleu' -> 'val/bleu'; others unchanged."""
    if not is_averaged(metric):
        return metric
    split, _, rest = metric.partition("/")
    return f"{split}/{rest.partition('/')[2]}"


def downstream_metric(task: str, name: str) -> str:
    """An lm-evaluation-harness task's score: ``downstream/hellaswag/acc`` (``name``: acc, acc_norm, bpb)."""
    return f"{DOWNSTREAM}/{task}/{name}"


def is_downstream(metric: str) -> bool:
    """Whether ``metric`` is a downstream task's score (``downstream/<task>/<name>``)."""
    parts = metric.split("/")
    return len(parts) == 3 and parts[0] == DOWNSTREAM and parts[2] in DOWNSTREAM_METRICS


def quality_metrics(is_text: bool) -> tuple[str, ...]:
    """What decoding is scored with: BLEU and chrF on text, exact match on a synthetic task."""
    return TEXT_METRICS if is_text else SYNTHETIC_METRICS


def length_metric(split: str, length: int, sliding: bool = False) -> str:
    """A language model's perplexity at evaluation length ``length``: ``val/ppl_at_256`` (non-overlapping
    windows) or ``val/ppl_at_256_sliding``."""
    return f"{split}/ppl_at_{length}" + ("_sliding" if sliding else "")


def growth_metric(split: str, length: int, sliding: bool = False) -> str:
    """A language model's loss at evaluation length ``length`` minus its loss at the training length (nats):
    ``val/loss_growth_at_256`` (non-overlapping windows) or ``val/loss_growth_at_256_sliding``."""
    return f"{split}/loss_growth_at_{length}" + ("_sliding" if sliding else "")


def evaluation_metrics(is_text: bool, *, decode: bool = True, split: str = "val", lm: bool = False,
                       lengths: tuple[int, ...] = (), sliding: bool = False,
                       train_length: int | None = None) -> list[str]:
    """The names in one evaluation's dict (`decode`: whether it decoded, i.e. bleu_during_training; `lm`:
    a language model's, with perplexity at each of its evaluation ``lengths``, and the loss growth at each
    length other than its ``train_length``)."""
    if lm:
        names = [f"{split}/{name}" for name in LM_METRICS]
        kinds = (False, True) if sliding else (False,)
        for n in lengths:
            names += [length_metric(split, n, kind) for kind in kinds]
        for n in lengths:
            if n != train_length:
                names += [growth_metric(split, n, kind) for kind in kinds]
        return names
    names_ = SPLIT_METRICS + (quality_metrics(is_text) if decode else ())
    return [f"{split}/{name}" for name in names_]


def result_metrics(is_text: bool, *, has_test: bool, lm: bool = False, lengths: tuple[int, ...] = (),
                   sliding: bool = False, with_averaged: bool = False, train_length: int | None = None,
                   with_target: bool = False, downstream: tuple[str, ...] = ()) -> list[str]:
    """The names in a finished run's result metrics (``with_averaged``: with train.weight_average, the
    averaged weights' reading of each val/test metric too; ``with_target``: with eval.target_loss, the
    steps to it; ``downstream``: eval.downstream's tasks, each task's scores)."""
    lm_names: dict[str, Any] = {"lm": lm, "lengths": lengths, "sliding": sliding,
                                "train_length": train_length}
    names = evaluation_metrics(is_text, **lm_names)
    if has_test:
        names += evaluation_metrics(is_text, split="test", **lm_names)
    if with_averaged:
        names += [averaged(n) for n in names]
    if with_target:
        names.append(VAL_STEPS_TO_TARGET)
    if lm:
        names.append(KV_CACHE)
    names += [downstream_metric(task, name) for task in downstream for name in DOWNSTREAM_METRICS]
    return names + [m for m in RUN_METRICS if m not in names]


def all_metrics() -> list[str]:
    """Every name any run can produce (for "did you mean" against typos)."""
    names: list[str] = []
    for split in ("val", "test"):
        names += [f"{split}/{m}" for m in SPLIT_METRICS + TEXT_METRICS + SYNTHETIC_METRICS + ("bpb",)]
    names += [averaged(n) for n in names]
    names += [VAL_STEPS_TO_TARGET, KV_CACHE]
    return names + [m for m in TRAINING_METRICS + RUN_METRICS if m not in names]


def higher_is_better(metric: str) -> bool:
    """BLEU, chrF, exact match and throughput grow when things improve; losses, time, memory, size shrink."""
    return metric.rpartition("/")[2] in _HIGHER_IS_BETTER


def mode(metric: str) -> Literal["min", "max"]:
    return "max" if higher_is_better(metric) else "min"


def direction(metric: str) -> Literal["minimize", "maximize"]:
    return "maximize" if higher_is_better(metric) else "minimize"


def with_natural_default(data: Any, field: str, natural: Callable[[str], str]) -> Any:
    """Raw spec section ``data`` with ``field`` set to ``natural(data["metric"])`` when the user left it
    out (a pydantic "before" validator's input: ``mode`` of early stopping, ``direction`` of an objective)."""
    if isinstance(data, dict) and field not in data and isinstance(data.get("metric"), str):
        return {**data, field: natural(data["metric"])}
    return data


def problem(metric: str, accepted: list[str], is_text: bool, *, at_evaluation: bool) -> str | None:
    """Why `metric` is not among the `accepted` ones a run reports (None when it is), for a spec error."""
    if metric in accepted:
        return None
    choices = f"accepted: {', '.join(accepted)}"
    if is_averaged(metric) and not at_evaluation and plain(metric) not in accepted:
        return problem(plain(metric), accepted, is_text, at_evaluation=at_evaluation)  # its own reason first
    if metric.startswith(f"{DOWNSTREAM}/"):
        return _downstream_problem(metric, accepted, at_evaluation)
    if metric in all_metrics():
        return f"{_why_missing(metric, is_text, at_evaluation)}; {choices}"
    close = difflib.get_close_matches(metric, all_metrics(), n=1, cutoff=0.6)
    if not close:
        return f"found {metric!r}; {choices}"
    if close[0] in accepted:
        return f"found {metric!r}; {choices}; did you mean {close[0]!r}?"
    why = _why_missing(close[0], is_text, at_evaluation)
    return f"found {metric!r}; {choices} (did you mean {close[0]!r}? {why})"


def _downstream_problem(metric: str, accepted: list[str], at_evaluation: bool) -> str:
    """Why a ``downstream/...`` name is not one a run reports: its form, or the task eval.downstream lacks."""
    if at_evaluation:
        return f"{metric} is scored once, on the best checkpoint at the run's end, not at each evaluation"
    if not is_downstream(metric):
        return (f"found {metric!r}: a downstream metric is downstream/<task>/<name>, name one of "
                f"{', '.join(DOWNSTREAM_METRICS)}")
    task = metric.split("/")[1]
    tasks = sorted({m.split("/")[1] for m in accepted if is_downstream(m)})
    if not tasks:
        return f"{metric} needs eval.downstream naming the lm-evaluation-harness task {task!r}"
    close = difflib.get_close_matches(task, tasks, n=1, cutoff=0.6)
    hint = f"; did you mean {close[0]!r}?" if close else ""
    return f"found {metric!r}: eval.downstream names the tasks {', '.join(tasks)}{hint}"


def _why_missing(metric: str, is_text: bool, at_evaluation: bool) -> str:
    if is_averaged(metric):
        if at_evaluation:
            return f"{metric} is the averaged weights' reading, taken once at the end of the run"
        return f"{metric} is the averaged weights' reading: set train.weight_average"
    if metric == VAL_STEPS_TO_TARGET:
        return f"{metric} counts the steps to a validation loss: set eval.target_loss"
    split, _, name = metric.rpartition("/")
    if name in TEXT_METRICS and not is_text:
        return f"{metric} needs text data; a synthetic task reports {split}/exact_match"
    if name in SYNTHETIC_METRICS and is_text:
        return f"{metric} is for synthetic tasks; text data reports {split}/bleu and {split}/chrf"
    if split == "test":
        return f"{metric}: " + ("only the validation split is evaluated during training" if at_evaluation
                                else "the data has no test split")
    if at_evaluation and split == "val":
        return f"{metric} is not computed at each evaluation: set eval.bleu_during_training: true"
    return f"{metric} is not computed at each evaluation (early stopping reads the val/ metrics)"
