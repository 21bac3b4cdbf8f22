"""The spec's study sections: `ablation` (ablate/study/ablation.py runs it) and `search`
(ablate/study/search.py runs it).

Only their shape is checked here; that axis and search-space keys name spec fields, that each axis value
gives a valid spec, and that metric names exist for the spec's data is checked where the whole spec is
known (ablate/spec/experiment.py ``ExperimentSpec``, ablate/spec/load.py).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field, model_validator

from ablate.spec import metricnames
from ablate.spec.axis_levels import axis_kinds, check_levels
from ablate.spec.base import BIG, Bool, Checks, Float, Int, LaterFields, SpecFieldError, Strict
from ablate.spec.ladder_section import DATA_BUDGET_SEP as DATA_BUDGET_SEP
from ablate.spec.ladder_section import RUNG_NAME as RUNG_NAME
from ablate.spec.ladder_section import RUNG_TOKENS as RUNG_TOKENS
from ablate.spec.ladder_section import LadderTune as LadderTune
from ablate.spec.ladder_section import ScalesSpec as ScalesSpec
from ablate.spec.ladder_section import ScalingRule as ScalingRule
from ablate.spec.ladder_section import Seed as Seed
from ablate.spec.ladder_section import SeedBudget as SeedBudget


class SeedRange(LaterFields):
    """Adaptive seeds: ``min`` seeds for every comparison, then ``step`` more at a time for the comparisons
    still open, up to ``max`` (seeds spec.seed, spec.seed + 1, ...; ablate/stats/sequential.py decides).
    ``max: auto`` lets the power plan choose the largest maximum whose worst case (every comparison to its
    last look) fits ``budget``, from the pilot's noise and cell times (ablate/study/sizing.py)."""

    min: Annotated[Int, Field(ge=2, le=100)]  # a paired t statistic needs two seeds
    """seeds every variant runs first (the first look)"""
    max: Annotated[Int, Field(ge=2, le=100)] | Literal["auto"]
    """the most seeds any comparison gets; auto: the largest maximum whose worst case fits seeds.budget, at
    the pilot's cell times (needs ablation.pilot)"""
    step: Annotated[Int, Field(ge=1, le=100)] = 1
    """seeds added at a time to the comparisons still open"""
    budget: SeedBudget | None = None
    """with max: auto only: what the study may spend ({cells: N} or {hours: H}); left out of the record
    when not given"""
    later_fields = ("budget",)

    @model_validator(mode="after")
    def _order(self) -> SeedRange:
        if self.max == "auto":
            if self.budget is None:
                raise SpecFieldError.single("budget", "max: auto needs a budget ({cells: N} or {hours: H}) "
                                            "to choose the maximum from", "max")
        elif self.budget is not None:
            raise SpecFieldError.single("budget", "a budget chooses max when max is auto (max is "
                                        f"{self.max})", "max")
        elif self.max < self.min:
            raise SpecFieldError.single("max", f"max {self.max} is below min {self.min}", "min")
        return self


class PilotSpec(Strict):
    """An earlier study on the same cell that sizes this one (ablate/study/pilot.py): ``study`` is its
    report folder (runs.csv; relative to this spec's folder) or its name in the tracking store; ``metric``
    the pilot's metric whose paired sd stands for this study's deciding metric (default: the same name,
    e.g. the plain reading where this study decides on an averaged one the pilot never recorded)."""

    study: Annotated[str, Field(min_length=1)]
    """the pilot's report folder (its runs.csv, relative to this spec's folder) or its study name in the
    tracking store"""
    metric: Annotated[str, Field(min_length=1)] | None = None
    """the pilot's metric whose paired sd stands for this study's deciding metric; default: the same name"""

    @model_validator(mode="before")
    @classmethod
    def _shorthand(cls, data: Any) -> Any:
        return {"study": data} if isinstance(data, str) else data


class Expectation(Strict):
    """A published result the study checks: how one variant compares with the baseline on the study's
    metric. The report opens by saying, for each, whether the runs reproduce it, contradict it, or cannot
    tell yet (ablate/report/sections/published.py)."""

    variant: Annotated[str, Field(min_length=1)]
    """the variant's label, as `ablate study --dry-run` lists it (e.g. residual=post_norm)"""
    effect: Literal["better", "worse", "none", "identical"]
    """the published result: better or worse than the baseline, none (within +-margin), or identical (the
    same value in every seed)"""
    source: Annotated[str, Field(min_length=1)]
    """who found it, e.g. "Xiong et al. 2020, Fig. 3" """
    margin: Annotated[Float, Field(gt=0)] | None = None
    """in the metric's units: effect none: the largest difference that still counts as none (default:
    ablation.min_effect); effect better or worse: the claim is superiority (or inferiority) by more than
    this, reproduced when the whole interval lies beyond it and contradicted when the interval's far bound
    falls short of it; left out, a better or worse claim is about the direction only"""
    kind: Literal["published", "identity"] = "published"
    """published: a result from the literature; identity: an implementation check (two spellings of one
    function, e.g. conv1d = linear), reported in its own section, never as literature reproduced"""
    at_convergence: Bool = True
    """the result holds for converged models (most do): on a study that did not converge the report says it
    was not tested at convergence; false: a claim about early training"""


class TuneFidelity(Strict):
    """How long each tuning trial trains: ``steps``, or a ``fraction`` of the cell's ``train.max_steps``."""

    steps: Annotated[Int, Field(ge=1, le=100_000_000)] | None = None
    """optimizer steps each trial trains"""
    fraction: Annotated[Float, Field(gt=0, le=1)] | None = None
    """each trial trains this fraction of the cell's train.max_steps"""

    @model_validator(mode="after")
    def _one(self) -> TuneFidelity:
        if (self.steps is None) == (self.fraction is None):
            raise SpecFieldError.single("steps", "give steps or fraction (of the cell's train.max_steps), "
                                        "exactly one", "fraction")
        return self


class TuneSpec(Strict):
    """An equal tuning budget for every variant (ablate/study/arm_settings.py): each variant gets its own
    search over ``space`` with the same number of trials, fidelity, sampler, sampler seed and pruner; the
    study's seeds then run each variant at its own best settings."""

    space: dict[str, SearchParam]
    """what each variant's search tunes, as search.space: a dotted spec field -> its range or choices"""
    trials: Annotated[Int, Field(ge=1, le=100_000)]
    """trials per variant, the baseline included"""
    fidelity: TuneFidelity | None = None
    """how long each trial trains; left out: as long as a cell"""
    seed: Seed | None = None
    """the seed every search trains its trials on and seeds its sampler with, the same for every variant;
    never one of the study's evaluation seeds; left out: the first seed after them"""
    sampler: Literal["tpe", "random", "grid"] = "tpe"
    """Optuna's sampler: tpe, random, or grid (every point of the space, trials at most)"""
    pruner: PrunerSpec = Field(default_factory=lambda: PrunerSpec())
    """which trials stop early, the same for every variant"""

    @model_validator(mode="after")
    def _shape(self) -> TuneSpec:
        if not self.space:
            raise SpecFieldError.single("space", "the tuning space is empty")
        if self.sampler == "grid" and any(p.choice is None and p.step is None and not p.int
                                          for p in self.space.values()):
            raise SpecFieldError.single("sampler", "the grid sampler needs choice, int or stepped ranges "
                                        "only", "space")
        return self


class ConfirmSpec(Strict):
    """Verdicts checked at a larger scale: each decided comparison rerun, paired by seed, at the setting
    ``overrides`` (dotted fields over this spec) or ``spec`` (another spec file, relative to this one)
    give."""

    overrides: dict[str, Any] = {}
    """the larger setting as dotted fields over this spec, e.g. {train.max_steps: 1800}"""
    spec: Annotated[str, Field(min_length=1)] | None = None
    """the larger setting as another spec file (relative to this one)"""
    seeds: Annotated[list[Seed], Field(min_length=2)] | Annotated[Int, Field(ge=2, le=100)]
    """a list of seeds, or how many from the spec's seed on; paired by seed with the baseline"""

    @model_validator(mode="after")
    def _shape(self) -> ConfirmSpec:
        checks = Checks()
        if bool(self.overrides) == (self.spec is not None):
            checks.fail("overrides", "give the larger setting as overrides: {field: value} or as spec: "
                        "<path>, exactly one", "spec")
        if isinstance(self.seeds, list) and len(set(self.seeds)) != len(self.seeds):
            checks.fail("seeds", "seeds must be distinct")
        checks.raise_any()
        return self

    def seed_list(self, first: int) -> list[int]:
        """The seeds: as listed, or ``seeds`` of them from ``first`` (the spec's seed) on."""
        return list(self.seeds) if isinstance(self.seeds, list) else [first + i for i in range(self.seeds)]




class AblationSpec(LaterFields):
    """An ablation study (``ablate study``): the rest of the spec is the baseline; every variant it
    derives runs on every seed, and the report compares each with the baseline, paired by seed."""

    axes: dict[str, list[Any] | dict[str, dict[str, Any]]] = {}
    """a dotted spec field -> the values it takes, e.g. model.norm: [builtin, rms]; or an axis name -> its
    levels, each a name -> the fields it sets, e.g. ffn: {swiglu: {model.ffn: swiglu}, gelu_mlp: {model.ffn:
    linear, model.activation: gelu}}; a value (or level) equal to the baseline's is the baseline"""
    design: Literal["one_at_a_time", "full_factorial", "variants"] = "one_at_a_time"
    """one_at_a_time: each axis value alone against the baseline; full_factorial: every combination of the
    axes (main effects and interactions in the report); variants: the listed variants as they are"""
    variants: list[dict[str, Any]] = []
    """design variants: each a set of overrides (dotted or nested fields) with an optional label, e.g.
    {label: paper, model.residual: post_norm, train.schedule.warmup_steps: 4000}"""
    seeds: list[Seed] | SeedRange | None = None
    """a fixed list of seeds, or {min, max, step}: more seeds only for the comparisons still open; left
    out: repeats, else the spec's seed alone"""
    repeats: Annotated[Int, Field(ge=1, le=1000)] | None = None
    """N seeds from the spec's seed on (instead of seeds)"""
    metric: str = "auto"
    """the metric the cells are compared on, e.g. val/bleu or val/loss (each cell's best checkpoint's);
    auto: val/bleu for text, val/exact_match for a synthetic task, val/ppl for a language model"""
    min_effect: Annotated[Float, Field(gt=0)] | None = None
    """with a seed range: the smallest effect worth knowing (the metric's units); a comparison whose
    interval lies within +-min_effect is decided as "no effect that large" and gets no more seeds"""
    alpha: Annotated[Float, Field(gt=0, lt=0.5)] = 0.05
    """overall two-sided level of the study's comparisons, corrected together (Holm or Bonferroni)"""
    expect: list[Expectation] = []
    """published results this study checks: the report opens with a verdict on each"""
    # The regime the verdicts hold for, stated on each.
    tuned_on: Annotated[str, Field(min_length=1)] | None = None
    """the variant the shared hyperparameters (learning rate, warm-up, sizes) were tuned on, stated beside
    every verdict; left out, the report says who tuned them only from the study's own searches (tune:)"""
    converged: Bool | None = None
    """whether the cell trains to convergence; null: judged from the baseline's validation loss over its
    last evaluations"""
    # Left out of the dumped spec when not given, so that the record of every study without them stays as
    # it was.
    tune: TuneSpec | None = None
    """an equal tuning budget for every variant: each is also compared at its own best settings"""
    confirm: ConfirmSpec | None = None
    """the decided verdicts rerun at a larger setting, paired by seed"""
    pilot: PilotSpec | None = None
    """an earlier study on the same cell whose seeds size this one before it runs (its paired sds and cell
    times): the power plan of `ablate study --dry-run` and seeds.max: auto read it"""
    scales: ScalesSpec | None = None
    """a ladder of model sizes: every variant at every rung, each variant's metric fitted against training
    compute, each comparison's transfer verdict and a backtest on the largest rung"""

    later_fields = ("tune", "confirm", "pilot", "tuned_on", "scales")

    @model_validator(mode="before")
    @classmethod
    def _axis_kinds(cls, data: Any) -> Any:
        axis_kinds(data)
        return data

    @model_validator(mode="after")
    def _shape(self) -> AblationSpec:
        checks = Checks()
        if self.design == "variants":
            if not self.variants:
                checks.fail("variants", "design 'variants' needs a non-empty variants list", "design")
        elif not self.axes:
            checks.fail("axes", f"design {self.design!r} needs at least one axis", "design")
        for field, values in self.axes.items():
            if not values:
                checks.fail(f"axes.{field}", f"axis {field!r} has no values")
            elif isinstance(values, dict):
                check_levels(checks, field, values)
        if self.seeds is not None and self.repeats is not None:
            checks.fail("repeats", "give seeds or repeats, not both", "seeds")
        if isinstance(self.seeds, list) and len(set(self.seeds)) != len(self.seeds):
            checks.fail("seeds", "seeds must be distinct")
        if isinstance(self.seeds, SeedRange) and self.seeds.max == "auto" and self.pilot is None:
            checks.fail("seeds.max", "max: auto is chosen from a pilot's noise: name one as ablation.pilot "
                        "(an earlier study's report folder or name)", "pilot")
        if self.min_effect is not None and not isinstance(self.seeds, SeedRange):
            checks.fail("min_effect", "min_effect decides when to stop adding seeds: it needs "
                        "seeds: {min: ..., max: ...}", "seeds")
        tuned = self.scales.tune if self.scales is not None else None
        if tuned is not None and isinstance(self.seeds, list):
            shared = sorted(set(tuned.seeds) & set(self.seeds))
            if shared:
                checks.fail("scales.tune.seeds", f"tuning seeds {shared} are also evaluation seeds: the "
                            "cells a variant is judged on must not have chosen its settings; take others",
                            "seeds")
        elif tuned is not None:
            checks.fail("scales.tune", "a tuned ladder evaluates a fixed list of seeds (ablation.seeds: "
                        "[...]), so that its tuning seeds are kept apart from them", "seeds")
        if self.scales is not None:
            for other in ("tune", "confirm"):
                if getattr(self, other) is not None:
                    checks.fail("scales", f"a ladder (scales) and {other} do not combine yet: run the ladder "
                                f"at the baseline's settings, or {other} without it", other)
        for i, claim in enumerate(self.expect):
            if claim.effect == "none" and claim.margin is None and self.min_effect is None:
                # Finding no significant difference is not evidence of none: the check needs a width.
                checks.fail(f"expect.{i}.margin", "effect: none needs a margin (the largest difference that "
                            "counts as none, in the metric's units) or ablation.min_effect", "effect")
            if claim.effect == "identical" and claim.margin is not None:
                checks.fail(f"expect.{i}.margin", "an identity check has no margin: every paired seed is "
                            "equal or it is not", "effect")
        checks.raise_any()
        return self

    def seed_list(self, first: int, auto_max: int | None = None) -> list[int]:
        """Every seed the study may train its cells on: the listed seeds, a range's up to its max (``auto``:
        up to ``auto_max``, for a caller that reads it before the plan sizes it), ``repeats`` from ``first``
        (the spec's seed), or ``first`` alone."""
        if isinstance(self.seeds, SeedRange):
            top = self.seeds.max if self.seeds.max != "auto" else auto_max
            if top is None:
                raise ValueError("seeds.max is auto: the plan sizes it, or give auto_max")
            return [first + i for i in range(top)]
        return list(self.seeds or [first + i for i in range(self.repeats or 1)])


class Objective(Strict):
    """What a search optimizes: one of a run's result metrics and its direction."""

    metric: str = metricnames.VAL_LOSS
    """a result metric of the run, e.g. val/loss, final/val/bleu"""
    # Left out: the metric's natural direction (maximize BLEU, minimize a loss), not always "minimize".
    direction: Literal["minimize", "maximize"] = Field(
        default="minimize", description="default: the metric's own direction (maximize bleu, minimize loss)")

    @model_validator(mode="before")
    @classmethod
    def _direction(cls, data: Any) -> Any:
        return metricnames.with_natural_default(data, "direction", metricnames.direction)


class SearchParam(Strict):
    """One dimension: `{low, high, log}` (float), `{low, high, int: true}` or `{choice: [...]}`."""

    low: Float | None = None
    """the range's lower end"""
    high: Float | None = None
    """the range's upper end"""
    log: Bool = False
    """sample the range on a log scale (learning rates)"""
    step: Annotated[Float, Field(gt=0)] | None = None
    """sample the range in steps of this size (needed by the grid sampler unless int)"""
    int: Bool = False
    """the range holds integers"""
    choice: list[Any] | None = None
    """the values to choose among (registry keys for a component, e.g. [pre_norm, post_norm])"""
    when: dict[str, list[Any] | Any] | None = None
    """sample this parameter only when other parameters take these values, e.g. {train.schedule.name:
    inverse_sqrt}"""

    @model_validator(mode="after")
    def _kind(self) -> SearchParam:
        if self.choice is not None:
            if self.low is not None or self.high is not None:
                raise ValueError("a parameter is either a choice or a low/high range, not both")
            if not self.choice:
                raise SpecFieldError.single("choice", "choice needs at least one value")
            return self
        if self.low is None or self.high is None:
            raise ValueError("give choice: [...] or both low and high")
        checks = Checks()
        if self.low >= self.high:
            checks.fail("low", f"low {self.low} must be below high {self.high}", "high")
        if self.log and self.low <= 0:
            checks.fail("low", f"a log range needs low > 0, found {self.low}", "log")
        checks.raise_any()
        return self


class PrunerSpec(Strict):
    """Which trials stop early, judged at each evaluation."""

    name: Literal["median", "hyperband", "none"] = "median"
    """median: stop a trial below the median of earlier trials at the same step; hyperband; none"""
    warmup_steps: Annotated[Int, Field(ge=0, le=BIG)] = 0
    """training steps of a trial before it may be pruned"""
    startup_trials: Annotated[Int, Field(ge=0, le=BIG)] = 2
    """trials that run in full before any is pruned"""


class SearchSpec(Strict):
    """A hyperparameter search (``ablate tune``): the rest of the spec is trial 0, the baseline."""

    objectives: list[Objective] = [Objective()]
    """one objective, or two for a Pareto front"""
    trials: Annotated[Int, Field(ge=1, le=1_000_000)] = 20
    """trials in all (`ablate tune --trials` overrides)"""
    timeout: Annotated[Float, Field(gt=0, le=1e9)] | None = None
    """seconds after which no new trial starts (each worker runs at least one)"""
    sampler: Literal["tpe", "random", "grid"] = "tpe"
    """Optuna's sampler: tpe, random, or grid (each point once, the baseline first)"""
    pruner: PrunerSpec = PrunerSpec()
    """which trials stop early"""
    space: dict[str, SearchParam] = {}
    """a dotted spec field -> its range or choices; any field, components included"""
    importance: Literal["ped_anova", "fanova"] = "ped_anova"
    """how parameter importances are computed for the report: PED-ANOVA or fANOVA"""

    @model_validator(mode="after")
    def _shape(self) -> SearchSpec:
        checks = Checks()
        if not 1 <= len(self.objectives) <= 2:
            checks.fail("objectives", "give one objective, or two for a Pareto front")
        if not self.space:
            checks.fail("space", "the search space is empty")
        if self.sampler == "grid" and any(p.choice is None and p.step is None and not p.int
                                          for p in self.space.values()):
            checks.fail("sampler", "the grid sampler needs choice, int or stepped ranges only", "space")
        checks.raise_any()
        return self
