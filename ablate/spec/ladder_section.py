"""The spec's ladder section, ``ablation.scales`` (ablate/study/rungs.py expands it; ablate/study/
ladder_checks.py and ladder_tuning.py check and tune it), and the budget a study may spend (``SeedBudget``,
also ``seeds.budget``'s). Only the shape is checked here; what needs the whole spec (fields that exist,
rungs that give valid specs, sizes, the scaling rule) is checked where the plan is made."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field, model_validator

from ablate.spec.base import Bool, Checks, Float, Int, LaterFields, SpecFieldError, Strict

Seed = Annotated[Int, Field(ge=0, le=2**32 - 1)]
RUNG_TOKENS = "tokens"  # a rung's own key beside its spec fields: the tokens its cells train on
RUNG_NAME = r"^[A-Za-z0-9][A-Za-z0-9_\-]{0,39}$"  # a tag value and a column entry


class SeedBudget(Strict):
    """What a study may spend, for ``seeds.max: auto``: ``cells`` (runs at the baseline's settings) or
    ``hours`` (one cell at a time, at the pilot's measured cell times), exactly one."""

    cells: Annotated[Int, Field(ge=2, le=1_000_000)] | None = None
    """cells at the baseline's settings, every variant counted"""
    hours: Annotated[Float, Field(gt=0, le=1e6)] | None = None
    """hours one cell at a time, at the pilot's measured cell times (train/wall_time_s)"""

    @model_validator(mode="after")
    def _one(self) -> SeedBudget:
        if (self.cells is None) == (self.hours is None):
            raise SpecFieldError.single("cells", "give the budget as cells or hours, exactly one", "hours")
        return self


LR = "train.optimizer.lr"  # the rate the rungs above the smallest may take from below (larger_rungs)


class GridFromBelow(Strict):
    """Each rung above the smallest tuned on a learning-rate grid around the best rate the rungs below it
    predict: their best rates' power law in parameters (ablate/stats/lr_power_law.py) with two rungs or more
    below, the rung below's best with one; so the rungs are tuned smallest first."""

    points: Annotated[Int, Field(ge=2, le=64)]
    """the rates each such rung tries (at least 2)"""
    factor: Annotated[Float, Field(gt=1, le=1e3)]
    """the ratio between neighbouring rates (above 1), e.g. 2: a factor 2 apart, centred on the prediction"""


class MupTransfer(Strict):
    """Every rung at the rate tuned at the smallest rung, with muP's multipliers (the spec's
    model.parametrisation: mup): allowed only once its own learning-rate transfer check passed over these
    widths (ablate/study/mup_check.py)."""

    check: Annotated[str, Field(min_length=1)]
    """a finished learning-rate transfer study's report folder (its runs.csv and export/, as
    reports/mup-transfer-wide-docs), relative to this spec: muP's best rate must be 'stable' across widths
    that span this ladder's (ablate/stats/best_rate_shift.py)"""


class LargerRungs(Strict):
    """How the rungs above the smallest get their learning rate, exactly one of: ``grid_from_below`` or
    ``mup``. Left out, every rung is tuned on its own grid."""

    grid_from_below: GridFromBelow | None = None
    """tune each rung on a grid around the rate the rungs below predict (smallest first)"""
    mup: MupTransfer | None = None
    """tune the smallest rung only and run every rung at its best rate under muP, once muP's own transfer
    check passed"""

    @model_validator(mode="after")
    def _one(self) -> LargerRungs:
        if (self.grid_from_below is None) == (self.mup is None):
            raise SpecFieldError.single("grid_from_below", "give exactly one of grid_from_below or mup",
                                        "mup")
        return self


class LadderTune(LaterFields):
    """Every variant tuned at every rung with the same budget (Wen et al. 2025, "Fantastic Pretraining
    Optimizers and Where to Find Them": each optimizer's hyperparameters tuned at each scale): ``grid`` is the
    values each named field takes, the same for every variant; ``rungs`` may give a rung a grid of its own;
    each grid point trains once per tuning seed, on ``seeds`` (never the study's evaluation seeds). At each
    rung every variant then runs the study's seeds at its own best grid point (ablate/study/ladder_tuning.py).
    """

    grid: dict[str, Annotated[list[Any], Field(min_length=1)]]
    """a dotted spec field -> the values every variant's search tries at every rung, e.g.
    {train.optimizer.lr: [1.0e-3, 2.0e-3, 4.0e-3, 8.0e-3]}; at least two values a field"""
    rungs: dict[str, dict[str, Annotated[list[Any], Field(min_length=1)]]] = {}
    """a rung's own grid for some fields (rung name -> field -> values), e.g. larger rungs' rates shifted
    down; a field it leaves out keeps ``grid``'s"""
    seeds: Annotated[list[Seed], Field(min_length=1)]
    """the seeds every grid point trains on: disjoint from the study's evaluation seeds (the tuning noise
    must not choose the settings its own cells are then judged by)"""
    larger_rungs: LargerRungs | None = None
    """how the rungs above the smallest get their learning rate: {grid_from_below: {points: 3, factor: 2}}
    (a grid around the rate the rungs below predict) or {mup: {check: REPORT}} (the smallest rung's rate
    under muP, once its transfer check passed); left out, every rung tunes on its own grid"""

    later_fields = ("larger_rungs",)

    @model_validator(mode="after")
    def _shape(self) -> LadderTune:
        checks = Checks()
        if not self.grid:
            checks.fail("grid", "the tuning grid is empty: name a field and its values, e.g. "
                        "{train.optimizer.lr: [1.0e-3, 3.0e-3, 1.0e-2]}")
        grids = [(f"grid.{k}", v) for k, v in self.grid.items()]
        grids += [(f"rungs.{r}.{k}", v) for r, g in self.rungs.items() for k, v in g.items()]
        for at, values in grids:
            if len({repr(v) for v in values}) < 2:
                checks.fail(at, f"a grid of one value ({values[0]!r}) tunes nothing: give at least two, so "
                            "that the best has neighbours to be judged against")
        for rung, fields in self.rungs.items():
            for key in fields:
                if key not in self.grid:
                    checks.fail(f"rungs.{rung}.{key}", f"{key} is not in tune.grid: a rung's grid shifts a "
                                "tuned field's values, it does not add a field", "grid")
        if len(set(self.seeds)) != len(self.seeds):
            checks.fail("seeds", "tuning seeds must be distinct")
        if self.larger_rungs is not None:
            self._larger(checks)
        checks.raise_any()
        return self

    def _larger(self, checks: Checks) -> None:
        """larger_rungs sets the rate of the rungs above the smallest: the grid must tune the rate, with
        positive numbers, and no rung may give its own rate grid besides."""
        how = "grid_from_below" if self.larger_rungs and self.larger_rungs.grid_from_below else "mup"
        rates = self.grid.get(LR)
        if rates is None:
            checks.fail(f"larger_rungs.{how}", f"{how} sets the learning rate of the larger rungs: tune.grid "
                        f"must tune {LR}", "grid")
        elif any(isinstance(v, bool) or not isinstance(v, int | float) or v <= 0 for v in rates):
            checks.fail(f"grid.{LR}", f"{how} reads learning rates on a log scale: every value must be a "
                        "positive number", f"larger_rungs.{how}")
        for rung, fields in self.rungs.items():
            if LR in fields:
                checks.fail(f"rungs.{rung}.{LR}", f"rung {rung!r} gives its own {LR} grid, but "
                            f"larger_rungs.{how} sets the rate of every rung above the smallest (the "
                            "smallest tunes on tune.grid): drop one", f"larger_rungs.{how}")


class ScalingRule(Strict):
    """How a ladder's rungs grow: width and depth together, by one aspect ratio (Kaplan et al. 2020,
    section 3.1: d_model / n_layer held fixed), with the head width and the feed-forward ratio fixed, so
    that no rung changes the model's shape and its size at once. Every rung must follow it (ablate/study/
    ladder_checks.py); the dry run and the report say which fields change between rungs."""

    aspect_ratio: Annotated[Float, Field(gt=0, le=1e6)]
    """d_model / layers at every rung (each stack's layers: decoder_layers, and encoder_layers for an
    encoder-decoder)"""
    d_head: Annotated[Int, Field(ge=1, le=65536)] | None = None
    """d_model / heads at every rung; left out: not checked"""
    ffn_ratio: Annotated[Float, Field(gt=0, le=1e3)] | None = None
    """d_ff / d_model at every rung; left out: not checked"""


DATA_BUDGET_SEP = "-"  # a budget rung's name: <size rung>-<multiple>x, e.g. m-2x


class ScalesSpec(LaterFields):
    """A ladder of model sizes (ablate/study/rungs.py, ablate/study/rung_rounds.py): every variant runs at
    every rung on every seed, paired by seed within a rung. Each variant's metric is fitted against
    training compute (FLOPs by ablate/engine/compute.py's formula) and each comparison gets a transfer
    verdict: whether its gap grows, shrinks, holds or reverses with compute (ablate/stats/transfer.py)."""

    rungs: dict[Annotated[str, Field(pattern=RUNG_NAME)], dict[str, Any]]
    """each rung's name -> its overrides of this spec (dotted or nested fields: width, depth, heads, steps,
    batch), and optionally tokens: N (the tokens each cell trains on; train.max_steps follows from
    data.batch_tokens), e.g. {small: {model.d_model: 64, model.d_ff: 256}, large: {model.d_model: 128,
    model.d_ff: 512, tokens: 4000000}}; ordered by compute in the report"""
    tokens_per_param: Annotated[Float, Field(gt=0, le=1e6)] | None = None
    """the tokens each rung's cells train on, as a multiple of the baseline's parameters without embeddings
    at that rung (Chinchilla's compute-optimal ratio is about 20); train.max_steps follows from
    data.batch_tokens; a rung that sets its steps or tokens itself keeps them"""
    target: Annotated[Float, Field(gt=0)] | None = None
    """the training compute (FLOPs) the transfer verdict predicts each gap at: above the largest rung's,
    and always reported as an extrapolation beyond it"""
    margin: Annotated[Float, Field(gt=0)] | None = None
    """the change of a gap over the ladder that still counts as holding, in the metric's units; default:
    ablation.min_effect"""
    budget: SeedBudget | None = None
    """what the ladder may spend ({cells: N} or {hours: H}, one cell at a time at the pilot's cell times):
    the power plan says which rungs it affords at the study's seeds, and how many seeds every rung gets"""
    tokens_counted: Literal["non_embedding", "all"] | None = None
    """which parameters tokens_per_param multiplies: non_embedding (the default: Kaplan et al.'s N, the layer
    stacks only) or all (embeddings and output head too, as Chinchilla counts them; needs the tokenizer's
    vocab_size); the dry run and the record say which"""
    rule: ScalingRule | None = None
    """the one scaling rule every rung follows (width and depth together by an aspect ratio); a rung that
    breaks it is refused"""
    match: Annotated[Float, Field(gt=0, lt=1)] | None = None
    """the relative tolerance on each variant's parameters (without embeddings) and planned FLOPs against
    the baseline's at every rung, e.g. 0.02: a variant outside it at any rung is refused (match it first,
    e.g. a GLU's model.glu_hidden: match_params); the dry run shows both beside the baseline's"""
    tune: LadderTune | None = None
    """every variant's settings tuned at every rung on tuning seeds (Wen et al. 2025), then each variant
    runs the study's seeds at its own best per rung"""
    budgets: Annotated[list[Annotated[Float, Field(gt=0, le=1e4)]], Field(min_length=1)] | None = None
    """data budgets per rung, as multiples of the rung's tokens (tokens_per_param or its own tokens), e.g.
    [1, 2, 4]: each budget a rung of its own, <rung>-<multiple>x, trained with its own full schedule (never
    an intermediate checkpoint of a longer run); its cells are tagged with the size rung and the multiple
    (ablate.size_rung, ablate.data_budget)"""
    speedup: Bool | None = None
    """report Wen et al.'s speedup: the data the tuned baseline needs to reach each variant's final loss,
    from the baseline's loss-against-tokens fit over the rung's budgets (needs at least 3 budgets)"""

    later_fields = ("tokens_per_param", "target", "margin", "budget", "tokens_counted", "rule", "match",
                    "tune", "budgets", "speedup")

    @model_validator(mode="after")
    def _shape(self) -> ScalesSpec:
        checks = Checks()
        if len(self.rungs) < 2:
            checks.fail("rungs", f"a ladder needs at least 2 rungs to fit anything against compute (found "
                        f"{len(self.rungs)}); one setting at a larger scale is ablation.confirm")
        for name, overrides in self.rungs.items():
            if not overrides:
                checks.fail(f"rungs.{name}", f"rung {name!r} overrides nothing: every rung is a size of its "
                            "own (give its width, depth, heads, steps, tokens or batch)")
            tokens = overrides.get(RUNG_TOKENS)
            if tokens is not None and (isinstance(tokens, bool) or not isinstance(tokens, int | float)
                                       or tokens <= 0):
                checks.fail(f"rungs.{name}.{RUNG_TOKENS}", f"tokens must be a positive number, found "
                            f"{tokens!r}")
            if tokens is not None and "train.max_steps" in overrides:
                checks.fail(f"rungs.{name}.{RUNG_TOKENS}", "give a rung's tokens or its train.max_steps, "
                            "not both", f"rungs.{name}")
        if self.budgets is not None and len(set(self.budgets)) != len(self.budgets):
            checks.fail("budgets", "data budgets must be distinct multiples")
        found = len(set(self.budgets or []))
        if self.speedup and found < 3:
            checks.fail("speedup", f"a speedup is read from the baseline's loss-against-tokens fit, which "
                        f"needs at least 3 data budgets per rung (found {found}): give budgets, e.g. "
                        "[1, 2, 4]", "budgets")
        if self.tune is not None:
            for rung in self.tune.rungs:
                if rung not in self.rungs:
                    checks.fail(f"tune.rungs.{rung}", f"no rung {rung!r} in this ladder (rungs: "
                                f"{', '.join(self.rungs)})", "rungs")
        checks.raise_any()
        return self
