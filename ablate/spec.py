"""The experiment spec: pydantic v2 models, one per section.

Every model forbids unknown keys. Components are named by registry keys and
checked against the registry, so a plugin's component is accepted as soon as
it is registered. Loading YAML (line numbers, ``extends:``, ``--set``) lives in
``ablate/specload.py``; this module only defines what a valid spec is.
"""

from __future__ import annotations

import difflib
import hashlib
import json
import math
import re
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

import registry

NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.\-]{0,99}$"


# Upper bound for counts that have no natural limit: keeps 10**30 from reaching torch.
BIG = 10**12


class Strict(BaseModel):
    # inf/nan are never a sensible setting (1e400 in YAML overflows to inf): reject them at the field.
    model_config = ConfigDict(extra="forbid", validate_assignment=False, allow_inf_nan=False)


class SpecFieldError(ValueError):
    """A cross-field check that blames one field: ``field`` is dotted, relative to the model raising it.

    Pydantic reports a model validator's error at the model's path; the spec loader reads ``field`` (from the
    error's ctx) to point at the offending line instead.
    """

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field


def _component(kind: str, value: str) -> str:
    registry.load_plugins()
    known = registry.names(kind)
    if value not in known:
        hint = difflib.get_close_matches(str(value), known, n=1, cutoff=0.6)
        suffix = f"; did you mean {hint[0]!r}?" if hint else ""
        raise ValueError(f"unknown {kind} {value!r}; accepted: {', '.join(known)}{suffix}")
    return value


# ---------------------------------------------------------------- data
class SyntheticData(Strict):
    task: Literal["copy", "reverse", "sort", "grammar"] = "reverse"
    vocab_size: Annotated[int, Field(ge=4, le=10_000)] = 20
    min_len: Annotated[int, Field(ge=1, le=1000)] = 3
    max_len: Annotated[int, Field(ge=1, le=1000)] = 12
    train_size: Annotated[int, Field(ge=1, le=10_000_000)] = 5000
    val_size: Annotated[int, Field(ge=1, le=1_000_000)] = 200
    test_size: Annotated[int, Field(ge=1, le=1_000_000)] = 200

    @model_validator(mode="after")
    def _lengths(self) -> SyntheticData:
        if self.min_len > self.max_len:
            raise SpecFieldError("min_len", f"min_len {self.min_len} is above max_len {self.max_len}")
        return self


class FilePair(Strict):
    """One split: either two parallel text files, or one TSV/JSONL file holding both sides."""

    src: str | None = None
    tgt: str | None = None
    path: str | None = None

    @model_validator(mode="after")
    def _one_form(self) -> FilePair:
        if self.path is None and (self.src is None or self.tgt is None):
            raise ValueError("give either src and tgt (parallel text files) or path (a TSV or JSONL file)")
        if self.path is not None and (self.src is not None or self.tgt is not None):
            raise ValueError("give either src and tgt or path, not both")
        return self


class FilesData(Strict):
    format: Literal["text", "tsv", "jsonl"] = "text"
    train: FilePair
    val: FilePair
    test: FilePair | None = None
    # Base folder for relative paths; ${ABLATE_DATA_DIR} style env vars are expanded at load time.
    root: str | None = None


class HubData(Strict):
    name: str
    config: str | None = None
    revision: str | None = None
    train_split: str = "train"
    val_split: str = "validation"
    test_split: str | None = "test"
    # Where the pair lives in each row: "translation" dict (opus style) or flat columns (multi30k style).
    field: str | None = "translation"


class TokenizerSpec(Strict):
    kind: Literal["bpe", "wordlevel", "char"] = "bpe"
    vocab_size: Annotated[int, Field(ge=8, le=1_000_000)] = 8000
    joint: bool = True
    min_freq: Annotated[int, Field(ge=1, le=BIG)] = 1


class DataSpec(Strict):
    source: Literal["synthetic", "files", "hub"] = "synthetic"
    synthetic: SyntheticData | None = None
    files: FilesData | None = None
    hub: HubData | None = None
    src_lang: str = "src"
    tgt_lang: str = "tgt"
    lowercase: bool = False
    reverse_source: bool = False
    max_len: Annotated[int, Field(ge=2, le=100_000)] = 128
    max_train_examples: Annotated[int, Field(ge=1, le=BIG)] | None = None
    tokenizer: TokenizerSpec = TokenizerSpec()
    batch_tokens: Annotated[int, Field(ge=16, le=10_000_000)] = 4096
    cache_dir: str = ".ablate_cache"

    @model_validator(mode="after")
    def _source_section(self) -> DataSpec:
        if self.source == "synthetic" and self.synthetic is None:
            self.synthetic = SyntheticData()
        section = getattr(self, self.source)
        if section is None:
            raise SpecFieldError(
                self.source, f"source is {self.source!r} but the data.{self.source} section is missing"
            )
        if self.source == "synthetic" and self.max_len < self.synthetic.max_len + 2:  # type: ignore[union-attr]
            raise SpecFieldError(
                "max_len",
                f"max_len {self.max_len} is too short for synthetic max_len "
                f"{self.synthetic.max_len} plus bos/eos"  # type: ignore[union-attr]
            )
        return self


# ---------------------------------------------------------------- model
def parse_mask_fill(value: Any) -> float:
    """`-inf`, `-1e9` or any other negative number; YAML hands `-1e9` over as a string."""
    if isinstance(value, bool):
        raise ValueError(f"found {value!r}; expected a negative number or -inf (e.g. -1e9)")
    if isinstance(value, str):
        text = value.strip().lower()
        if text in ("-inf", "-.inf", "-infinity"):
            return float("-inf")
        try:
            number = float(text)
        except ValueError:
            raise ValueError(f"found {value!r}; expected a negative number or -inf (e.g. -1e9)") from None
    elif isinstance(value, int | float):
        number = float(value)
    else:
        raise ValueError(f"found {value!r}; expected a negative number or -inf (e.g. -1e9)")
    if math.isnan(number) or number >= 0:
        raise ValueError(f"found {value!r}; the mask fill must be negative (-inf, -1e9, -1e6 ...)")
    return number


def format_mask_fill(value: float) -> str:
    """The canonical spelling: '-inf' or '-1e9' style, as users write it in YAML."""
    if math.isinf(value):
        return "-inf"
    mantissa, exponent = f"{value:e}".split("e")
    mantissa = mantissa.rstrip("0").rstrip(".")
    return f"{mantissa}e{int(exponent)}"


class ModelSpec(Strict):
    d_model: Annotated[int, Field(gt=0, le=65536)] = 128
    heads: Annotated[int, Field(gt=0, le=1024)] = 4
    encoder_layers: Annotated[int, Field(gt=0, le=256)] = 2
    decoder_layers: Annotated[int, Field(gt=0, le=256)] = 2
    d_ff: Annotated[int, Field(gt=0, le=1_000_000)] = 512
    dropout: Annotated[float, Field(ge=0.0, lt=1.0)] = 0.1
    attention_dropout: Annotated[float, Field(ge=0.0, lt=1.0)] = 0.0
    # One field per axis; each value is a registry key of that kind.
    residual: str = "pre_norm"
    positions: str = "sinusoidal"
    ffn: str = "linear"
    norm: str = "builtin"
    mask: str = "-inf"
    attention: str = "sdpa"
    # Options of single variants.
    norm_eps: Annotated[float, Field(gt=0.0, lt=1.0)] = 1e-6
    norm_affine: Literal["per_feature", "scalar"] = "per_feature"  # custom norm only (preset E: scalar)
    shared_layer_norm: bool = False  # post_norm only (preset D: one norm per layer)
    position_dropout: bool = True
    max_positions: Annotated[int, Field(gt=0, le=1_000_000)] = 512
    embed_scale: bool = True  # multiply embeddings by sqrt(d_model)
    embeddings: Literal["separate", "shared", "tied"] = "separate"
    init: Literal["xavier", "default"] = "xavier"

    @field_validator("residual")
    @classmethod
    def _residual(cls, v: str) -> str:
        return _component("residual", v)

    @field_validator("positions")
    @classmethod
    def _positions(cls, v: str) -> str:
        return _component("positions", v)

    @field_validator("ffn")
    @classmethod
    def _ffn(cls, v: str) -> str:
        return _component("ffn", v)

    @field_validator("norm")
    @classmethod
    def _norm(cls, v: str) -> str:
        return _component("norm", v)

    @field_validator("attention")
    @classmethod
    def _attention(cls, v: str) -> str:
        return _component("attention", v)

    @field_validator("mask", mode="before")
    @classmethod
    def _mask(cls, v: Any) -> str:
        return format_mask_fill(parse_mask_fill(v))

    @property
    def mask_fill(self) -> float:
        return parse_mask_fill(self.mask)

    @model_validator(mode="after")
    def _dims(self) -> ModelSpec:
        if self.d_model % self.heads:
            raise SpecFieldError("heads", f"d_model {self.d_model} is not divisible by heads {self.heads}")
        if self.positions == "sinusoidal" and self.d_model % 2:
            raise SpecFieldError("d_model", f"sinusoidal positions need an even d_model, not {self.d_model}")
        if self.shared_layer_norm and self.residual != "post_norm":
            raise SpecFieldError("shared_layer_norm", "shared_layer_norm applies to residual: post_norm only")
        if self.norm_affine == "scalar" and self.norm != "custom":
            raise SpecFieldError("norm_affine", "norm_affine: scalar applies to norm: custom only")
        return self


# ---------------------------------------------------------------- train
Beta = Annotated[float, Field(ge=0.0, lt=1.0)]


class OptimizerSpec(Strict):
    name: Literal["adam", "adamw"] = "adam"
    lr: Annotated[float, Field(gt=0.0, le=100.0)] = 1e-3
    betas: tuple[Beta, Beta] = (0.9, 0.98)
    eps: Annotated[float, Field(gt=0.0, lt=1.0)] = 1e-9
    weight_decay: Annotated[float, Field(ge=0.0, lt=1.0)] = 0.0


class ScheduleSpec(Strict):
    name: Literal["constant", "inverse_sqrt", "cosine"] = "inverse_sqrt"
    warmup_steps: Annotated[int, Field(ge=0, le=10_000_000)] = 400
    min_lr_ratio: Annotated[float, Field(ge=0.0, le=1.0)] = 0.0  # cosine floor


class EarlyStopping(Strict):
    metric: str = "val/loss"
    mode: Literal["min", "max"] = "min"
    patience: Annotated[int, Field(ge=1, le=BIG)] = 5


class TrainSpec(Strict):
    precision: Literal["auto", "fp32", "bf16", "fp16"] = "fp32"
    optimizer: OptimizerSpec = OptimizerSpec()
    schedule: ScheduleSpec = ScheduleSpec()
    accumulation: Annotated[int, Field(ge=1, le=4096)] = 1
    clip_norm: Annotated[float, Field(ge=0.0, le=1e6)] | None = 1.0
    label_smoothing: Annotated[float, Field(ge=0.0, lt=1.0)] = 0.0
    max_steps: Annotated[int, Field(ge=1, le=100_000_000)] | None = 1000
    epochs: Annotated[int, Field(ge=1, le=100_000)] | None = None
    eval_every: Annotated[int, Field(ge=1, le=BIG)] = 200
    checkpoint_every: Annotated[int, Field(ge=1, le=BIG)] = 200
    early_stopping: EarlyStopping | None = None
    # A loss above divergence_factor x the first logged loss (or non-finite) ends the run as diverged.
    divergence_factor: Annotated[float, Field(gt=1.0, le=1e12)] = 4.0
    compile: bool = False
    threads: Annotated[int, Field(ge=0, le=1024)] = 0  # 0: leave torch's default
    out_dir: str = "runs"

    @model_validator(mode="after")
    def _budget(self) -> TrainSpec:
        if self.max_steps is None and self.epochs is None:
            raise SpecFieldError("max_steps", "set max_steps, epochs or both: training needs an end")
        return self


# ---------------------------------------------------------------- eval
class DecodeSpec(Strict):
    strategy: Literal["greedy", "beam"] = "greedy"
    beam: Annotated[int, Field(ge=1, le=64)] = 4
    length_penalty: Annotated[float, Field(ge=0.0, le=10.0)] = 0.6
    max_len_a: Annotated[float, Field(ge=0.0, le=10.0)] = 1.2
    max_len_b: Annotated[int, Field(ge=0, le=10_000)] = 10


class EvalSpec(Strict):
    decode: DecodeSpec = DecodeSpec()
    metric: Literal["auto", "bleu", "exact_match"] = "auto"
    samples: Annotated[int, Field(ge=0, le=1000)] = 5
    max_sentences: Annotated[int, Field(ge=1, le=BIG)] | None = None  # cap decoding at each evaluation
    bleu_during_training: bool = True


# ---------------------------------------------------------------- tracking
class TrackingSpec(Strict):
    enabled: bool = True
    uri: str | None = None
    experiment: str | None = None
    log_model: bool = False
    async_logging: bool = False
    system_metrics: bool = False
    log_checkpoint: bool = True


# ---------------------------------------------------------------- ablation / search
class AblationSpec(Strict):
    axes: dict[str, list[Any]] = {}
    design: Literal["one_at_a_time", "full_factorial", "variants"] = "one_at_a_time"
    variants: list[dict[str, Any]] = []
    seeds: list[int] | None = None
    repeats: Annotated[int, Field(ge=1, le=1000)] | None = None
    metric: str = "auto"

    @model_validator(mode="after")
    def _shape(self) -> AblationSpec:
        if self.design == "variants":
            if not self.variants:
                raise SpecFieldError("variants", "design 'variants' needs a non-empty variants list")
        elif not self.axes:
            raise SpecFieldError("axes", f"design {self.design!r} needs at least one axis")
        for field, values in self.axes.items():
            if not values:
                raise SpecFieldError(f"axes.{field}", f"axis {field!r} has no values")
        if self.seeds is not None and self.repeats is not None:
            raise SpecFieldError("repeats", "give seeds or repeats, not both")
        if self.seeds is not None and len(set(self.seeds)) != len(self.seeds):
            raise SpecFieldError("seeds", "seeds must be distinct")
        return self


class Objective(Strict):
    metric: str = "val/loss"
    direction: Literal["minimize", "maximize"] = "minimize"


class SearchParam(Strict):
    """One dimension: `{low, high, log}` (float), `{low, high, int: true}` or `{choice: [...]}`."""

    low: float | None = None
    high: float | None = None
    log: bool = False
    step: float | None = None
    int: bool = False
    choice: list[Any] | None = None
    when: dict[str, list[Any] | Any] | None = None

    @model_validator(mode="after")
    def _kind(self) -> SearchParam:
        if self.choice is not None:
            if self.low is not None or self.high is not None:
                raise ValueError("a parameter is either a choice or a low/high range, not both")
            if not self.choice:
                raise SpecFieldError("choice", "choice needs at least one value")
            return self
        if self.low is None or self.high is None:
            raise ValueError("give choice: [...] or both low and high")
        if self.low >= self.high:
            raise SpecFieldError("low", f"low {self.low} must be below high {self.high}")
        if self.log and self.low <= 0:
            raise SpecFieldError("low", f"a log range needs low > 0, found {self.low}")
        return self


class PrunerSpec(Strict):
    name: Literal["median", "hyperband", "none"] = "median"
    warmup_steps: Annotated[int, Field(ge=0, le=BIG)] = 0  # evaluations-steps before pruning may start
    startup_trials: Annotated[int, Field(ge=0, le=BIG)] = 2


class SearchSpec(Strict):
    objectives: list[Objective] = [Objective()]
    trials: Annotated[int, Field(ge=1, le=1_000_000)] = 20
    timeout: Annotated[float, Field(gt=0, le=1e9)] | None = None
    sampler: Literal["tpe", "random", "grid"] = "tpe"
    pruner: PrunerSpec = PrunerSpec()
    space: dict[str, SearchParam] = {}
    importance: Literal["ped_anova", "fanova"] = "ped_anova"

    @model_validator(mode="after")
    def _shape(self) -> SearchSpec:
        if not 1 <= len(self.objectives) <= 2:
            raise SpecFieldError("objectives", "give one objective, or two for a Pareto front")
        if not self.space:
            raise SpecFieldError("space", "the search space is empty")
        if self.sampler == "grid" and any(p.choice is None and p.step is None and not p.int
                                          for p in self.space.values()):
            raise SpecFieldError("sampler", "the grid sampler needs choice, int or stepped ranges only")
        return self


# ---------------------------------------------------------------- the whole spec
class ExperimentSpec(Strict):
    name: Annotated[str, Field(pattern=NAME_PATTERN)]
    description: str = ""
    seed: Annotated[int, Field(ge=0, le=2**32 - 1)] = 0
    data: DataSpec = DataSpec()
    model: ModelSpec = ModelSpec()
    train: TrainSpec = TrainSpec()
    eval: EvalSpec = EvalSpec()
    tracking: TrackingSpec = TrackingSpec()
    ablation: AblationSpec | None = None
    search: SearchSpec | None = None

    @model_validator(mode="after")
    def _cross(self) -> ExperimentSpec:
        if self.model.embeddings in ("shared", "tied") and not self.data.tokenizer.joint \
                and self.data.source != "synthetic":
            raise SpecFieldError(
                "model.embeddings",
                f"model.embeddings {self.model.embeddings!r} needs one vocabulary: "
                "set data.tokenizer.joint: true",
            )
        # Both position tables (learned embedding, sinusoidal buffer) stop at max_positions.
        if self.data.max_len > self.model.max_positions:
            raise SpecFieldError(
                "data.max_len",
                f"data.max_len {self.data.max_len} exceeds model.max_positions {self.model.max_positions}"
            )
        return self

    def resolved(self) -> dict[str, Any]:
        """The spec as plain JSON-able data, defaults filled in: what is hashed and logged."""
        return self.model_dump(mode="json")

    def identity(self) -> dict[str, Any]:
        """What decides a run's result: everything but tracking and the study sections."""
        data = self.resolved()
        for key in ("tracking", "ablation", "search", "description"):
            data.pop(key, None)
        return data

    @property
    def spec_hash(self) -> str:
        return spec_hash(self.identity())


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
