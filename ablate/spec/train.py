"""The spec's ``train`` section: optimizer, schedule and loss (the training recipe's registry axes, each a
section of its own: :class:`RecipeSection`), early stopping, weight averaging and the trainer's own settings
(ablate/engine/trainer.py reads them). Importable from ``ablate.spec.experiment`` too."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Annotated, Any, ClassVar, Literal

from pydantic import Field, SerializerFunctionWrapHandler, create_model, model_serializer, model_validator

import registry
from ablate.spec import metricnames
from ablate.spec.axis_fields import (
    axis_fields,
    check_axis,
    identity_options,
    option_names,
    section_axis,
    section_option_values,
)
from ablate.spec.base import BIG, Bool, Checks, Float, Int, LaterFields, SpecFieldError, Strict


class RecipeSection(Strict):
    """A section of the training recipe that holds one registry axis (registry/optimizer.py,
    registry/schedule.py, registry/loss.py): its ``name`` is the axis's variant, its other fields the
    section's own plain settings and the axis's options, each accepted only for the variants that declare it
    (ablate/spec/axis_fields.py). The dumped section leaves out the options of variants not chosen."""

    section: ClassVar[str] = ""

    @model_validator(mode="after")
    def _axis(self) -> RecipeSection:
        checks = Checks()
        check_axis(self, section_axis(self.section), self.model_dump(), checks)
        checks.raise_any()
        return self

    @model_serializer(mode="wrap")
    def _dump(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        data: dict[str, Any] = handler(self)
        names = option_names(self.section)
        return {key: value for key, value in data.items() if not (value is None and key in names)}

    @property
    def kind(self) -> str:
        return section_axis(self.section).kind

    def option_values(self) -> dict[str, Any]:
        """The chosen variant's constructor keywords: the axis-wide options and its own."""
        return section_option_values(self, self.kind, getattr(self, "name"))  # noqa: B009  # a dynamic field


class _OptimizerFields(RecipeSection):
    section: ClassVar[str] = "train.optimizer"


class _ScheduleFields(RecipeSection):
    section: ClassVar[str] = "train.schedule"


class _LossFields(RecipeSection):
    section: ClassVar[str] = "train.loss"


def _recipe_model(name: str, base: type[RecipeSection], doc: str, **plain: Any) -> Any:
    """The section's model: the axis's ``name`` first, then its ``plain`` fields, then the options."""
    fields = axis_fields(base.section)
    first = next(iter(fields))
    ordered = {first: fields.pop(first), **plain, **fields}
    return create_model(name, __base__=base, __module__=__name__, __doc__=doc, **ordered)


_LR = (Annotated[Float, Field(gt=0.0, le=100.0)], Field(
    default=1e-3, description="the peak learning rate (the schedule's warm-up rises to it); muP scales it "
    "per parameter group"))
_WARMUP = (Annotated[Int, Field(ge=0, le=10_000_000)], Field(
    default=400, description="steps of linear warm-up from 0 to the peak learning rate, before every "
    "schedule's shape; 0: none"))


if TYPE_CHECKING:
    class OptimizerSpec(_OptimizerFields):
        """Static view for type checkers: the axis's fields are dynamic."""

        name: str
        lr: float
        weight_decay: float
        no_decay: str
        betas: tuple[float, float]
        eps: float

        def __getattr__(self, name: str) -> Any: ...

    class ScheduleSpec(_ScheduleFields):
        """Static view for type checkers."""

        name: str
        warmup_steps: int
        min_lr_ratio: float

        def __getattr__(self, name: str) -> Any: ...

    class LossSpec(_LossFields):
        """Static view for type checkers."""

        name: str

        def __getattr__(self, name: str) -> Any: ...
else:
    OptimizerSpec = _recipe_model(
        "OptimizerSpec", _OptimizerFields, "The optimizer (registry/optimizer.py, `ablate list optimizer`): "
        "its name, peak learning rate, weight decay, which parameters are not decayed, and the chosen "
        "optimizer's own options.", lr=_LR)
    ScheduleSpec = _recipe_model(
        "ScheduleSpec", _ScheduleFields, "The learning-rate schedule (registry/schedule.py, `ablate list "
        "schedule`): a linear warm-up to train.optimizer.lr, then its shape.", warmup_steps=_WARMUP)
    LossSpec = _recipe_model(
        "LossSpec", _LossFields, "The training loss (registry/loss.py, `ablate list loss`): cross-entropy, "
        "or with loss terms; evaluation always reports the plain cross-entropy.")


def train_identity(train: dict[str, Any]) -> dict[str, Any]:
    """The dumped train section as a run's identity: each recipe section as ablate/spec/axis_fields.py's
    ``identity_options`` keeps it (options and axes declared ``added_later`` out at their defaults), and a
    recipe section left empty so (``train.loss`` at the plain cross-entropy) out altogether."""
    out = dict(train)
    for key in RECIPE_SECTIONS:
        if isinstance(out.get(key), dict):
            part = identity_options(f"train.{key}", out[key])
            version = _version(f"train.{key}", out[key].get("name"))
            if version > 1:  # a fixed variant's runs get a new identity, and no other run
                part["version"] = version
            if part:
                out[key] = part
            else:
                out.pop(key)
    return out


def recipe_choices(train: Mapping[str, Any]) -> dict[str, str]:
    """{axis kind: variant} of a dumped train section's recipe axes ({'optimizer': 'adamw', ...})."""
    out = {}
    for key in RECIPE_SECTIONS:
        part = train.get(key)
        if isinstance(part, Mapping) and isinstance(part.get("name"), str):
            out[section_axis(f"train.{key}").kind] = part["name"]
    return out


def _version(section: str, name: Any) -> int:
    kind = section_axis(section).kind
    if not isinstance(name, str) or (kind, name) not in registry.REGISTRY:
        return 1
    return registry.REGISTRY.entry(kind, name).version


RECIPE_SECTIONS = ("optimizer", "schedule", "loss")  # the train fields that are recipe sections


class EarlyStopping(Strict):
    """Stop when the evaluations stop improving; the same metric picks the best checkpoint."""

    metric: str = metricnames.VAL_LOSS
    """a metric each evaluation measures (val/loss, val/ppl, val/bleu, val/exact_match, ...)"""
    mode: Literal["min", "max"] = Field(default="min", description="default: the metric's own (max for bleu)")
    patience: Annotated[Int, Field(ge=1, le=BIG)] = 5
    """evaluations without improvement before training stops"""

    @model_validator(mode="before")
    @classmethod
    def _default_mode(cls, data: Any) -> Any:
        return metricnames.with_natural_default(data, "mode", metricnames.mode)

    @model_validator(mode="after")
    def _consistent_mode(self) -> EarlyStopping:
        natural = metricnames.mode(self.metric)
        if self.metric in metricnames.all_metrics() and self.mode != natural:
            better = "higher" if natural == "max" else "lower"
            raise SpecFieldError.single(
                "mode", f"mode {self.mode!r} contradicts {self.metric} ({better} is better): use {natural!r} "
                "or leave mode out", "metric"
            )
        return self


class WeightAverage(Strict):
    """An average of the weights evaluated at the end of the run beside the best checkpoint (ablate/engine/
    averaging.py). One field for options that exclude each other; ``kind`` says which, and only its own
    options are accepted:

    - ``last_k`` (``k``, ``every``): the mean of the last ``k`` snapshots of the weights, one taken at every
      optimizer step that is a multiple of ``every``: theta_avg = (1/k) * sum_j theta_(t_j). Vaswani et al.
      2017 (section 6.1) averaged the last 5 (base) or 20 (big) checkpoints, written at 10-minute
      intervals, as fairseq's ``scripts/average_checkpoints.py`` does; Kaddour 2022 ("latest weight
      averaging") the last k epochs' weights.
    - ``ema`` (``decay``): an exponential moving average updated after every optimizer step, theta_ema <-
      decay * theta_ema + (1 - decay) * theta, started at the weights after the first step (the averaging
      of Polyak & Juditsky 1992 with exponentially fading weights, as timm's ModelEmaV3 and torch's
      swa_utils.get_ema_multi_avg_fn keep it). Its horizon is about 1 / (1 - decay) steps: choose it well
      inside the run (0.99 averages over ~100 steps; 0.999 in a 700-step run still weighs the first
      steps' weights).
    """

    kind: Literal["last_k", "ema"]
    """last_k: the mean of the last k snapshots; ema: an exponential moving average of the weights"""
    k: Annotated[Int, Field(ge=1, le=1000)] | None = None
    """last_k: how many snapshots are averaged"""
    every: Annotated[Int, Field(ge=1, le=BIG)] | None = None
    """last_k: a snapshot at every optimizer step that is a multiple of this"""
    decay: Annotated[Float, Field(ge=0.0, lt=1.0)] | None = None
    """ema: the weight of the running average at each step (horizon about 1 / (1 - decay) steps)"""

    @model_serializer(mode="wrap")
    def _dump(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        data: dict[str, Any] = handler(self)  # the kind's own options only: the others are None
        return {key: value for key, value in data.items() if value is not None}

    @model_validator(mode="after")
    def _options_of_kind(self) -> WeightAverage:
        checks = Checks()
        own = {"last_k": ("k", "every"), "ema": ("decay",)}[self.kind]
        for option in ("k", "every", "decay"):
            value = getattr(self, option)
            if option in own and value is None:
                checks.fail(option, f"kind {self.kind} needs {option}", "kind")
            elif option not in own and value is not None:
                checks.fail(option, f"{option} is an option of another kind, not of {self.kind} (which takes "
                            f"{' and '.join(own)})", "kind")
        checks.raise_any()
        return self


class TrainSpec(LaterFields):
    """The one trainer: AMP precision, optimizer, schedule, budget, evaluations and checkpoints."""

    precision: Literal["auto", "fp32", "bf16", "fp16"] = "fp32"
    """fp32; bf16 or fp16 autocast (fp16 with a GradScaler); auto: bf16 where this machine has bf16 units,
    else fp32 on a CPU, fp16 on an older GPU (a study resolves it once for all its cells); checked against
    this machine when the spec loads"""
    optimizer: OptimizerSpec = OptimizerSpec()  # type: ignore[call-arg]  # a dynamic model: defaults
    """the optimizer, its peak learning rate and its options (`ablate list optimizer`)"""
    schedule: ScheduleSpec = ScheduleSpec()  # type: ignore[call-arg]
    """the learning-rate schedule (`ablate list schedule`)"""
    loss: LossSpec = LossSpec()  # type: ignore[call-arg]
    """the training loss (`ablate list loss`): cross_entropy, or z_loss with its coefficient"""
    accumulation: Annotated[Int, Field(ge=1, le=4096)] = 1
    """batches whose gradients add up to one optimizer step"""
    clip_norm: Annotated[Float, Field(ge=0.0, le=1e6)] | None = 1.0
    """clip the gradients' global norm to this (after unscaling); null: no clipping"""
    label_smoothing: Annotated[Float, Field(ge=0.0, lt=1.0)] = 0.0
    """label smoothing of the cross-entropy loss (0.1 in Vaswani et al. 2017)"""
    max_steps: Annotated[Int, Field(ge=1, le=100_000_000)] | None = 1000
    """optimizer steps to train; null: epochs decide"""
    epochs: Annotated[Int, Field(ge=1, le=100_000)] | None = None
    """passes over the training data; with max_steps too, whichever ends first"""
    eval_every: Annotated[Int, Field(ge=1, le=BIG)] = 200
    """steps between evaluations on the validation split"""
    checkpoint_every: Annotated[Int, Field(ge=1, le=BIG)] = 200
    """steps between resumable checkpoints"""
    early_stopping: EarlyStopping | None = None
    """stop when the validation metric stops improving; left out: train the whole budget"""
    divergence_factor: Annotated[Float, Field(gt=1.0, le=1e12)] = 4.0
    """a loss above this times the first logged loss (or a non-finite one) ends the run as diverged"""
    weight_average: WeightAverage | None = None
    """evaluate an average of the weights at the end, beside the best checkpoint (the val/averaged/...
    metrics; a study decides on them by default): {kind: last_k, k, every} or {kind: ema, decay}"""
    compile: Bool = False
    """train through torch.compile"""
    compile_mode: Literal["default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs"] | None \
        = None
    """torch.compile's mode with train.compile (reduce-overhead: CUDA graphs; max-autotune: kernels tuned
    per shape); unset: torch's default"""
    compile_scope: Literal["model", "layer"] | None = None
    """what train.compile compiles: the whole model (unset, or model), or each layer on its own (layer: the
    identical layers share one graph, so it compiles in about a layer's time; evaluation runs eager)"""
    threads: Annotated[Int, Field(ge=0, le=1024)] = 0
    """CPU threads torch uses; 0: torch's default (on cores other jobs share, 1 can run several times faster
    than 2). Part of a run's identity, as it always was: runs recorded with it keep their hash"""
    out_dir: str = "runs"
    """folder of run directories (checkpoints, summary.json), relative to the working directory"""
    device: Annotated[str, Field(pattern=r"^(cpu|cuda(:[0-9]+)?)$")] | None = None
    """where to train: cpu, cuda or cuda:N; unset, a study worker's own GPU or this machine's default. A
    machine's setting, not the design's: left out of the run's identity"""

    later_fields = ("weight_average", "compile_mode", "compile_scope")

    @model_validator(mode="after")
    def _compile_options(self) -> TrainSpec:
        for key in ("compile_mode", "compile_scope"):
            if getattr(self, key) is not None and not self.compile:
                raise SpecFieldError.single(key, "applies to a compiled run: set train.compile: true too",
                                            "compile")
        return self

    @model_validator(mode="after")
    def _budget(self) -> TrainSpec:
        if self.max_steps is None and self.epochs is None:
            raise SpecFieldError.single(
                "max_steps", "set max_steps, epochs or both: training needs an end", "epochs"
            )
        avg = self.weight_average
        if avg is not None and avg.k is not None and avg.every is not None and self.max_steps is not None \
                and avg.k * avg.every > self.max_steps:
            raise SpecFieldError.single(
                "weight_average.k", f"{avg.k} snapshots every {avg.every} steps need {avg.k * avg.every} "
                f"steps; train.max_steps is {self.max_steps}", "weight_average.every", "max_steps"
            )
        return self


# ---------------------------------------------------------------- eval
