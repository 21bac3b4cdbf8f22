"""The spec's study sections: `ablation` (ablate/study/ablation.py runs it) and `search`
(ablate/study/search.py runs it).

Only their shape is checked here; that axis and search-space keys name spec fields, that each axis value
gives a valid spec, and that metric names exist for the spec's data is checked where the whole spec is
known (ablate/spec/experiment.py ``ExperimentSpec``, ablate/spec/load.py).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field, SerializerFunctionWrapHandler, model_serializer, model_validator

import ablate.spec.metricnames as MN
from ablate.spec import metricnames
from ablate.spec.base import BIG, Bool, Checks, Float, Int, SpecFieldError, Strict

Seed = Annotated[Int, Field(ge=0, le=2**32 - 1)]


class SeedRange(Strict):
    """Adaptive seeds: ``min`` seeds for every comparison, then ``step`` more at a time for the comparisons
    still open, up to ``max`` (seeds spec.seed, spec.seed + 1, ...; ablate/study/sequential.py decides)."""

    min: Annotated[Int, Field(ge=2, le=100)]  # a paired t statistic needs two seeds
    max: Annotated[Int, Field(ge=2, le=100)]
    step: Annotated[Int, Field(ge=1, le=100)] = 1

    @model_validator(mode="after")
    def _order(self) -> SeedRange:
        if self.max < self.min:
            raise SpecFieldError.single("max", f"max {self.max} is below min {self.min}", "min")
        return self


class Expectation(Strict):
    """A published result the study checks: how one variant compares with the baseline on the study's
    metric. The report opens by saying, for each, whether the runs reproduce it, contradict it, or cannot
    tell yet (ablate/report/sections/published.py)."""

    variant: Annotated[str, Field(min_length=1)]  # a variant's label, as `ablate ablate --dry-run` lists it
    # better / worse than the baseline; none: within +-margin; identical: the same value in every seed
    effect: Literal["better", "worse", "none", "identical"]
    source: Annotated[str, Field(min_length=1)]  # who found it, e.g. "Xiong et al. 2020, Fig. 3"
    # For effect none: the largest difference that still counts as no effect (the metric's units);
    # default: ablation.min_effect.
    margin: Annotated[Float, Field(gt=0)] | None = None
    # published: a result from the literature; identity: an implementation check (two spellings of one
    # function, e.g. conv1d = linear), reported in its own section, never as literature reproduced.
    kind: Literal["published", "identity"] = "published"
    # The paper's result holds for converged models (most do): on a study that did not converge, the
    # report says the claim was not tested at convergence. false: a claim about early training.
    at_convergence: Bool = True


class TuneFidelity(Strict):
    """How long each tuning trial trains: ``steps``, or a ``fraction`` of the cell's ``train.max_steps``."""

    steps: Annotated[Int, Field(ge=1, le=100_000_000)] | None = None
    fraction: Annotated[Float, Field(gt=0, le=1)] | None = None

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

    space: dict[str, SearchParam]  # as search.space: dotted spec fields
    trials: Annotated[Int, Field(ge=1, le=100_000)]  # per variant
    fidelity: TuneFidelity | None = None  # None: each trial trains as long as a cell
    seed: Seed | None = None  # the sampler's seed, the same for every variant; None: the spec's seed
    sampler: Literal["tpe", "random", "grid"] = "tpe"  # grid: every point of the space, trials at most
    pruner: PrunerSpec = Field(default_factory=lambda: PrunerSpec())

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
    spec: Annotated[str, Field(min_length=1)] | None = None
    seeds: Annotated[list[Seed], Field(min_length=2)] | Annotated[Int, Field(ge=2, le=100)]

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


class AblationSpec(Strict):
    axes: dict[str, list[Any]] = {}
    design: Literal["one_at_a_time", "full_factorial", "variants"] = "one_at_a_time"
    variants: list[dict[str, Any]] = []
    seeds: list[Seed] | SeedRange | None = None  # a fixed list, or {min, max, step} chosen by the evidence
    repeats: Annotated[Int, Field(ge=1, le=1000)] | None = None
    metric: str = "auto"  # a result metric (ablate/spec/metricnames.py), or the data's quality metric
    # With adaptive seeds: a comparison whose interval lies within +-min_effect (the metric's units) is
    # decided as "no effect that large" and gets no more seeds.
    min_effect: Annotated[Float, Field(gt=0)] | None = None
    alpha: Annotated[Float, Field(gt=0, lt=0.5)] = 0.05  # overall two-sided level of each comparison
    expect: list[Expectation] = []  # published results this study checks (the report's opening lines)
    # The regime the verdicts hold for, stated on each: which variant the shared hyperparameters (learning
    # rate, warm-up, dropout, sizes) were tuned on, and whether the cell converged (None: judged from the
    # baseline's validation loss over its last evaluations).
    tuned_on: Annotated[str, Field(min_length=1)] = "baseline"
    converged: Bool | None = None
    # Each variant at its own best (an equal tuning budget) and verdicts checked at a larger scale; left out
    # of the dumped spec when not given, so that the record of every study without them stays as it was.
    tune: TuneSpec | None = None
    confirm: ConfirmSpec | None = None

    @model_serializer(mode="wrap")
    def _dump(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        data: dict[str, Any] = handler(self)
        for key in ("tune", "confirm"):
            if data.get(key) is None:
                data.pop(key, None)
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
        if self.seeds is not None and self.repeats is not None:
            checks.fail("repeats", "give seeds or repeats, not both", "seeds")
        if isinstance(self.seeds, list) and len(set(self.seeds)) != len(self.seeds):
            checks.fail("seeds", "seeds must be distinct")
        if self.min_effect is not None and not isinstance(self.seeds, SeedRange):
            checks.fail("min_effect", "min_effect decides when to stop adding seeds: it needs "
                        "seeds: {min: ..., max: ...}", "seeds")
        for i, claim in enumerate(self.expect):
            if claim.effect == "none" and claim.margin is None and self.min_effect is None:
                # Finding no significant difference is not evidence of none: the check needs a width.
                checks.fail(f"expect.{i}.margin", "effect: none needs a margin (the largest difference that "
                            "counts as none, in the metric's units) or ablation.min_effect", "effect")
            if claim.effect != "none" and claim.margin is not None:
                checks.fail(f"expect.{i}.margin", f"margin applies to effect: none only (this one is "
                            f"{claim.effect})", "effect")
        checks.raise_any()
        return self


class Objective(Strict):
    metric: str = MN.VAL_LOSS  # a result metric (ablate/spec/metricnames.py)
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
    high: Float | None = None
    log: Bool = False
    step: Annotated[Float, Field(gt=0)] | None = None
    int: Bool = False
    choice: list[Any] | None = None
    when: dict[str, list[Any] | Any] | None = None

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
    name: Literal["median", "hyperband", "none"] = "median"
    warmup_steps: Annotated[Int, Field(ge=0, le=BIG)] = 0  # evaluations-steps before pruning may start
    startup_trials: Annotated[Int, Field(ge=0, le=BIG)] = 2


class SearchSpec(Strict):
    objectives: list[Objective] = [Objective()]
    trials: Annotated[Int, Field(ge=1, le=1_000_000)] = 20
    timeout: Annotated[Float, Field(gt=0, le=1e9)] | None = None
    sampler: Literal["tpe", "random", "grid"] = "tpe"
    pruner: PrunerSpec = PrunerSpec()
    space: dict[str, SearchParam] = {}
    importance: Literal["ped_anova", "fanova"] = "ped_anova"

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
