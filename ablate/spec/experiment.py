"""The experiment spec: pydantic v2 models, one per section.

Every model forbids unknown keys and takes only its own types (ablate/spec/base.py: `heads: true` is an
error, not 1). Components are named by registry keys and checked against the registry, plugins included
(the registry loads them on first use). Cross-field checks report every failing check at once. Loading
YAML (line numbers, ``extends:``, ``--set``, this machine's precisions) lives in ``ablate/spec/load.py``.
The `data` section is in ``ablate/spec/data.py``, `ablation` and `search` in ``ablate/spec/study_sections.py``
(all importable from here); this module holds the rest and the whole spec.
"""

from __future__ import annotations

import difflib
import hashlib
import json
import re
from typing import Annotated, Any, Literal

from pydantic import Field, model_validator

import registry
from ablate.errors import AblateError
from ablate.spec import metricnames
from ablate.spec.base import BIG, NAME_PATTERN, Bool, Checks, Float, Int, LaterFields, SpecFieldError, Strict
from ablate.spec.data import (
    LM_TASKS,
    DataSpec,
    FilePair,
    FilesData,
    HubData,
    SyntheticData,
    TextFiles,
    TokenizerSpec,
)
from ablate.spec.harness_tasks import DownstreamSpec, DownstreamTask
from ablate.spec.model import ModelSpec, drop_unset_options, format_mask_fill, identity_of, parse_mask_fill
from ablate.spec.study_sections import AblationSpec, Objective, PrunerSpec, SearchParam, SearchSpec, Seed
from ablate.spec.train import (
    EarlyStopping,
    LossSpec,
    OptimizerSpec,
    ScheduleSpec,
    TrainSpec,
    WeightAverage,
    train_identity,
)

__all__ = [
    "BIG", "NAME_PATTERN", "AblationSpec", "DataSpec", "DecodeSpec", "DownstreamSpec", "DownstreamTask",
    "EarlyStopping", "EvalSpec",
    "ExperimentSpec", "FilePair", "FilesData", "HubData", "LossSpec", "ModelSpec", "Objective",
    "OptimizerSpec",
    "PrunerSpec", "ScheduleSpec", "SearchParam", "SearchSpec", "SpecFieldError", "Strict", "SyntheticData",
    "TextFiles", "TokenizerSpec", "TrackingSpec", "TrainSpec", "WeightAverage", "flatten", "format_mask_fill",
    "is_valid_name", "parse_mask_fill", "spec_hash",
]

Name = Annotated[str, Field(pattern=NAME_PATTERN)]


def _did_you_mean(word: str, choices: list[str]) -> str:
    hint = difflib.get_close_matches(word, choices, n=1, cutoff=0.6)
    return f"; did you mean {hint[0]!r}?" if hint else ""


# ---------------------------------------------------------------- train (ablate/spec/train.py)


# ---------------------------------------------------------------- eval
class DecodeSpec(Strict):
    """How translations are decoded for BLEU, chrF and exact match."""

    strategy: Literal["greedy", "beam"] = "greedy"
    """greedy, or beam search (batched)"""
    beam: Annotated[Int, Field(ge=1, le=64)] = 4
    """beam size (strategy: beam)"""
    length_penalty: Annotated[Float, Field(ge=0.0, le=10.0)] = 0.6
    """beam: GNMT's length penalty alpha (0: none)"""
    max_len_a: Annotated[Float, Field(ge=0.0, le=10.0)] = 1.2
    """a hypothesis has at most max_len_a x source length + max_len_b tokens (fairseq's rule)"""
    max_len_b: Annotated[Int, Field(ge=0, le=10_000)] = 10
    """see max_len_a"""


# The tokens a language model's evaluation during training scores when eval.max_tokens is left out: 2^21,
# nanoGPT's 200 evaluation batches of 12 x 1,024 tokens at GPT-2 small's scale (its estimate's standard error
# is well under a hundredth of a nat). Every committed language-model study's validation split is smaller
# (Multi30k's captions, the Python docs' 10 pages, the kernel docs' 79 pages), so none of their evaluations
# changed with the cap.
LM_EVAL_TOKENS = 1 << 21
class EvalSpec(LaterFields):
    """What each evaluation measures; the best checkpoint is scored once more on val and test at the end."""

    later_fields = ("target_loss", "max_tokens", "downstream")

    decode: DecodeSpec = DecodeSpec()
    """how translations are decoded"""
    metric: Literal["auto", "bleu", "exact_match"] = "auto"
    """the quality metric: auto (BLEU and chrF for text, exact match for a synthetic task), bleu or
    exact_match"""
    samples: Annotated[Int, Field(ge=0, le=1000)] = 5
    """sample translations (or continuations) logged at each evaluation"""
    max_sentences: Annotated[Int, Field(ge=1, le=BIG)] | None = None
    """decode at most this many validation sentences at each evaluation (the final scores use all)"""
    max_tokens: Annotated[Int, Field(ge=1, le=BIG)] | None = None
    """score at most this many target tokens of the validation split at each evaluation during training
    (whole batches, in the split's order, so every evaluation scores the same tokens; the final scores use
    all); left out: 2,097,152 (2^21) for a language model, the whole split for translation"""
    bleu_during_training: Bool = True
    """decode and score at each evaluation; false: only the losses until the end (faster)"""
    # Press et al. 2022, section 4: non-overlapping and sliding windows.
    lengths: list[Annotated[Int, Field(ge=2, le=1_000_000)]] = []
    """language models: perplexity at each of these evaluation lengths in tokens, e.g. [32, 64, 128, 256]
    for blocks of data.max_len 32 (val/ppl_at_<n>)"""
    sliding_stride: Annotated[Int, Field(ge=1, le=1_000_000)] | None = None
    """language models: also sliding windows scoring this many new tokens each (val/ppl_at_<n>_sliding)"""
    target_loss: Annotated[Float, Field(gt=0.0, le=1e4)] | None = None
    """a validation loss to reach: the run's result then holds val/steps_to_target, the step at which the
    evaluations' val/loss first reached it (interpolated between evaluations; a run that never does counts
    its whole budget). Evaluate often (train.eval_every) for a fine reading. The report reads a run that
    never reached it as censored (with each side's "did not reach" count). With ablation.tune the arm at
    each variant's own best counts its steps to the tuned baseline's own final val/loss (its best search
    trial's, fixed before the arm's seeds run), not to this one"""
    downstream: DownstreamSpec | None = None
    """language models: lm-evaluation-harness tasks scored on the best checkpoint at the end of the run
    (downstream/<task>/acc, acc_norm, bpb); needs the interop extra"""

    def token_cap(self, lm: bool) -> int | None:
        """The target tokens each evaluation during training scores: ``max_tokens``, else
        :data:`LM_EVAL_TOKENS` for a language model and the whole split (None) for translation."""
        if self.max_tokens is not None:
            return self.max_tokens
        return LM_EVAL_TOKENS if lm else None


# ---------------------------------------------------------------- tracking
class TrackingSpec(Strict):
    """Where runs are recorded: MLflow (./mlflow.db and ./mlartifacts unless told)."""

    enabled: Bool = True
    """record the run in MLflow"""
    uri: str | None = None
    """an MLflow tracking URI (http://host:5000, postgresql://...); left out: MLFLOW_TRACKING_URI, else
    sqlite:///mlflow.db in the working directory"""
    experiment: Name | None = None
    """the MLflow experiment (and a study's reports/<study>/ folder); left out: the spec's name"""
    log_model: Bool = False
    """also log the model with mlflow.pytorch (and a weights-only copy)"""
    async_logging: Bool = False
    """MLflow's asynchronous metric logging"""
    system_metrics: Bool = False
    """MLflow's system metrics (CPU, GPU, memory) during the run"""
    log_checkpoint: Bool = True
    """log the best checkpoint as an artifact (checkpoints/best.pt)"""


# ---------------------------------------------------------------- the whole spec
class ExperimentSpec(Strict):
    """One experiment: a model, its data and its training; with ``ablation`` or ``search``, a study."""

    name: Name
    """the experiment's name: its run folder and MLflow experiment (letters, digits, _ . -)"""
    description: str = ""
    """free text: the MLflow experiment's and run's description"""
    seed: Seed = 0
    """the run's seed: the same seed gives the same data order and the same initial weights in every
    parameter two variants share"""
    data: DataSpec = DataSpec()
    """the corpus, its tokenizer and batching"""
    model: ModelSpec = ModelSpec()  # type: ignore[call-arg]  # a dynamic model: its axes have defaults
    """the model's sizes and one registry key per design axis (`ablate list`)"""
    train: TrainSpec = TrainSpec()
    """the trainer"""
    eval: EvalSpec = EvalSpec()
    """evaluation and decoding"""
    tracking: TrackingSpec = TrackingSpec()
    """MLflow tracking"""
    ablation: AblationSpec | None = None
    """an ablation study of this spec (`ablate study`)"""
    search: SearchSpec | None = None
    """a hyperparameter search from this spec (`ablate tune`)"""

    @model_validator(mode="after")
    def _cross(self) -> ExperimentSpec:
        checks = Checks()
        data, model = self.data, self.model
        if self.is_lm:
            self._check_lm(checks)
        else:
            if data.is_lm:
                what = "source: text" if data.source == "text" else f"synthetic task {data.synthetic.task!r}"  # type: ignore[union-attr]
                checks.fail("data.source", f"{what} is language-modelling data: it needs model.arch: "
                            "decoder_only", "model.arch")
            if self.eval.lengths or self.eval.sliding_stride is not None:
                checks.fail("eval.lengths", "eval.lengths and eval.sliding_stride measure a language model's "
                            "perplexity: they need model.arch: decoder_only", "model.arch")
            if self.eval.downstream is not None:
                checks.fail("eval.downstream", "lm-evaluation-harness tasks score a language model: they "
                            "need model.arch: decoder_only", "model.arch")
            if data.source == "hub" and data.hub is not None and data.hub.streaming:
                checks.fail("data.hub.streaming", "streaming reads a language model's corpus into token "
                            "shards: it needs model.arch: decoder_only (translation pairs are loaded whole)",
                            "model.arch")
        joint = getattr(registry.get("embeddings", model.embeddings), "needs_joint_vocabulary", False)
        if joint and not data.tokenizer.joint and data.is_text and not self.is_lm:
            checks.fail(
                "model.embeddings",
                f"model.embeddings {model.embeddings!r} needs one vocabulary: set data.tokenizer.joint: true",
                "data.tokenizer.joint", "data.source",
            )
        # Both position tables (learned embedding, sinusoidal buffer) stop at max_positions.
        if data.max_len > model.max_positions:
            checks.fail(
                "data.max_len",
                f"data.max_len {data.max_len} exceeds model.max_positions {model.max_positions}",
                "model.max_positions",
            )
        if not self.is_lm and self.eval.metric not in ("auto", *metricnames.quality_metrics(data.is_text)):
            kind = "text data (files, hub)" if self.eval.metric == "bleu" else "a synthetic task"
            checks.fail("eval.metric", f"{self.eval.metric} needs {kind}; or use auto", "data.source")
        self._check_recipe(checks)
        self._check_metrics(checks)
        checks.raise_any()
        return self

    def _check_recipe(self, checks: Checks) -> None:
        """What the model and the training recipe must agree on: muP's per-group learning rates need an
        optimizer muP's table covers; a sliding window needs the decoder-only stack."""
        model, optimizer = self.model, self.train.optimizer
        rule = getattr(registry.get("optimizer", optimizer.name), "mup_rule", None)
        relative = getattr(registry.get("parametrisation", model.parametrisation), "width_relative", False)
        if relative and rule is None:
            takers = [n for n in registry.names("optimizer")
                      if getattr(registry.get("optimizer", n), "mup_rule", None) is not None]
            checks.fail("model.parametrisation", f"{model.parametrisation} scales learning rates per "
                        "parameter group as Yang et al. 2022 (Table 3) do for SGD and Adam-like optimizers; "
                        f"optimizer {optimizer.name} is not one: use {', '.join(takers)}, or "
                        "parametrisation: standard",
                        "train.optimizer.name")
        if model.window is not None and not self.is_lm:
            checks.fail("model.window", "a sliding window applies to the causal self-attention of "
                        "model.arch decoder_only (Mistral, Longformer's causal form); this spec is "
                        "encoder_decoder: leave model.window out", "model.arch")

    @property
    def is_lm(self) -> bool:
        """A decoder-only language model (``model.arch: decoder_only``)."""
        return self.model.arch == "decoder_only"

    def _check_lm(self, checks: Checks) -> None:
        """What a decoder-only spec must (not) say: LM data, axis values that apply to one stack."""
        data, model = self.data, self.model
        if data.source == "files" or (data.source == "synthetic" and not data.is_lm):
            task = f"synthetic task {data.synthetic.task!r}" if data.synthetic else "parallel files"
            checks.fail("data.source", f"model.arch decoder_only trains a language model, not on a "
                        f"translation {task}: use source: text, hub, or synthetic task "
                        f"{' / '.join(LM_TASKS)}", "model.arch")
        if data.source == "hub" and data.hub is not None and data.hub.field in (None, "translation"):
            checks.fail("data.hub.field", "a language model reads one text column: set data.hub.field "
                        "to its name (e.g. text)", "model.arch")
        entry = registry.get("embeddings", model.embeddings)
        if not getattr(entry, "decoder_only", True):
            checks.fail("model.embeddings", f"model.embeddings {model.embeddings!r} does not apply to "
                        "model.arch decoder_only (there is no source side): use separate or tied",
                        "model.arch")
        for i, n in enumerate(self.eval.lengths):
            if n > model.max_positions:
                checks.fail(f"eval.lengths.{i}", f"evaluation length {n} is past model.max_positions "
                            f"{model.max_positions}, the model's position table (learned positions cannot "
                            "extrapolate beyond it; the others' buffers stop there): raise "
                            "model.max_positions",
                            "model.max_positions")
        for marker, does in (("source_bos", "opens"), ("source_eos", "ends")):
            if getattr(data, marker):
                checks.fail(f"data.{marker}", f"data.{marker} {does} a translation source; a language model "
                            "has no source: leave it out", "model.arch")
        default_depth = type(model).model_fields["encoder_layers"].default
        if "encoder_layers" in model.model_fields_set and model.encoder_layers != default_depth:
            checks.fail("model.encoder_layers", "model.encoder_layers does not apply to model.arch "
                        "decoder_only: its depth is model.decoder_layers", "model.arch")
        if self.eval.metric != "auto":
            checks.fail("eval.metric", f"{self.eval.metric} scores translations; a language model reports "
                        "perplexity and bits per byte: leave eval.metric out", "model.arch")

    def _check_metrics(self, checks: Checks) -> None:
        """Every metric the spec names must be one its runs report (a typo would silently fall back)."""
        data_fields = ("data.source", "data.files.test", "data.hub.test_split")
        is_text, es = self.data.is_text, self.train.early_stopping
        if es is not None:
            problem = metricnames.problem(es.metric, self.evaluation_metrics(), is_text, at_evaluation=True)
            if problem:
                checks.fail("train.early_stopping.metric", problem, *data_fields, "eval.bleu_during_training")
        result = metricnames.result_metrics(is_text, has_test=self.data.has_test,
                                            with_averaged=self.train.weight_average is not None,
                                            with_target=self.eval.target_loss is not None,
                                            downstream=self.downstream_tasks(), **self._lm_names())
        if self.ablation is not None:
            metric = self.ablation.metric
            problem = metricnames.problem(metric, ["auto", *result], is_text, at_evaluation=False)
            if problem:
                checks.fail("ablation.metric", problem, *data_fields)
        for i, objective in enumerate(self.search.objectives if self.search is not None else []):
            problem = metricnames.problem(objective.metric, result, is_text, at_evaluation=False)
            if problem:
                checks.fail(f"search.objectives.{i}.metric", problem, *data_fields)

    def _lm_names(self) -> dict[str, Any]:
        """The keywords of metricnames' lists that a language model's metrics depend on."""
        return {"lm": self.is_lm, "lengths": tuple(self.eval.lengths),
                "sliding": self.eval.sliding_stride is not None, "train_length": self.data.max_len}

    def downstream_tasks(self) -> tuple[str, ...]:
        """The lm-evaluation-harness tasks a run scores at its end (none unless eval.downstream)."""
        return self.eval.downstream.names() if self.eval.downstream is not None else ()

    def evaluation_metrics(self) -> list[str]:
        """The names each evaluation during training measures."""
        return metricnames.evaluation_metrics(self.data.is_text, decode=self.eval.bleu_during_training,
                                              **self._lm_names())

    def selection_metric(self) -> str:
        """The metric that picks the best checkpoint and drives early stopping (``val/loss`` without early
        stopping). A metric the evaluations of this run do not measure is an AblateError, never a silent
        switch (validation rules it out; a spec built without validation still gets the error here)."""
        es = self.train.early_stopping
        key = es.metric if es is not None else metricnames.VAL_LOSS
        measured = self.evaluation_metrics()
        if key not in measured:
            raise AblateError(f"train.early_stopping.metric: {key!r} is not measured at the evaluations "
                              f"of this run (they measure {', '.join(measured)}; decoding metrics need "
                              f"eval.bleu_during_training: true)")
        return key

    def resolved(self) -> dict[str, Any]:
        """The spec as plain JSON-able data, defaults filled in (options of variants not chosen left out):
        what is logged and dumped."""
        data = self.model_dump(mode="json")
        data["model"] = drop_unset_options(data["model"])
        if self.is_lm:
            data["model"].pop("encoder_layers", None)  # one stack: its depth is decoder_layers
        return data

    def identity(self) -> dict[str, Any]:
        """What decides a run's result: everything but tracking, the study sections and ``train.device``
        (the model section as ablate.spec.model.identity_of keeps hashes of older specs). ``train.threads``
        stays in it: runs were recorded with it, and leaving it out would change the hash of every one
        that set it."""
        data = self.resolved()
        for key in ("tracking", "ablation", "search", "description"):
            data.pop(key, None)
        data["train"].pop("device", None)  # where a run trains does not change what it computes
        data["train"] = train_identity(data["train"])
        data["model"] = identity_of(data["model"])
        _drop_later_defaults(data)
        return data

    @property
    def spec_hash(self) -> str:
        return spec_hash(self.identity())


# Fields added after the first record format (language modelling), left out of a run's identity at their
# defaults: a spec written before them keeps its hash.
_LATER_DEFAULTS: dict[tuple[str, str], Any] = {
    ("data", "text"): None, ("data", "document_lines"): 1, ("data", "source_bos"): False,
    ("data", "source_eos"): False,
    ("eval", "lengths"): [], ("eval", "sliding_stride"): None,
}


def _drop_later_defaults(data: dict[str, Any]) -> None:
    for (section, key), default in _LATER_DEFAULTS.items():
        part = data.get(section)
        if isinstance(part, dict) and key in part and part[key] == default:
            del part[key]
    if data.get("model", {}).get("arch") == "decoder_only":
        data["model"].pop("encoder_layers", None)  # one stack: its depth is decoder_layers
    text = data.get("data", {}).get("text")
    if isinstance(text, dict) and text.get("documents") == "lines":
        del text["documents"]  # how text was cut before documents had a field: older hashes stay
    for section, key, default in _LATER_NESTED:
        part = data.get("data", {}).get(section)
        if isinstance(part, dict) and key in part and part[key] == default:
            del part[key]


# Nested fields of the data section added later, left out of the identity at their defaults (a tokenizer
# file and its special tokens, a streamed hub corpus): a spec that does not set them keeps its hash.
_LATER_NESTED: tuple[tuple[str, str, Any], ...] = (
    ("tokenizer", "path", None), ("tokenizer", "specials", None), ("hub", "streaming", False),
)


def spec_hash(data: dict[str, Any]) -> str:
    """A stable 12-hex-digit hash of resolved spec data (key order does not matter)."""
    canonical = json.dumps(data, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(canonical.encode()).hexdigest()[:12]


def flatten(data: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """{'a': {'b': 1}} -> {'a.b': 1}; lists stay values (MLflow params, spec diffs)."""
    out: dict[str, Any] = {}
    for key, value in data.items():
        dotted = f"{prefix}{key}"
        if isinstance(value, dict) and value:
            out.update(flatten(value, dotted + "."))
        else:
            out[dotted] = value
    return out


def is_valid_name(name: str) -> bool:
    return re.match(NAME_PATTERN, name) is not None
