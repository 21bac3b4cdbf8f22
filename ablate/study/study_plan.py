"""What a planned study is: its cells (variant x seed, each one run), its seeds, the metric it decides by,
the Optuna study it is queued in, and the design its verdicts follow (``ablate.stats.sequential.Design``,
built from the spec's ablation section in one place). ``ablate/study/designs.py`` makes one from a spec
(`plan_study`); every module of the study floor takes it typed as :class:`StudyPlan`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from optuna.distributions import CategoricalChoiceType

from ablate.spec import metricnames
from ablate.spec.experiment import ExperimentSpec, flatten
from ablate.spec.study_sections import AblationSpec, SeedRange
from ablate.spec.yamlsrc import SourceMap
from ablate.stats.sequential import Design
from ablate.stats.verdict import one_family
from ablate.study import arm_settings, optuna_attrs, study_names
from ablate.study.derived_specs import derive
from ablate.study.optuna_store import Store
from ablate.study.rungs import Rung
from ablate.tracking import record

TERMINAL = ("finished", "diverged", "failed")


@dataclass(frozen=True)
class Cell:
    label: str  # 'baseline', 'residual=post_norm', 'train.schedule.warmup_steps=0'
    seed: int
    spec: ExperimentSpec  # the baseline with the overrides applied and seed = the cell's seed
    overrides: dict[str, Any] = field(default_factory=dict)
    diff: list[tuple[str, Any, Any]] = field(default_factory=list)  # (field, baseline, cell)
    arm: str = record.BASELINE_ARM  # which comparison queued it (ablation.tune, ablation.confirm)
    rung: str | None = None  # a ladder's rung (ablation.scales); its overrides are in ``overrides``

    @property
    def key(self) -> str:
        """The cell's identity, also the name of its run directory: <spec hash>-s<seed>."""
        return f"{self.spec.spec_hash}-s{self.seed}"

    def attrs(self) -> optuna_attrs.CellAttrs:
        """What the store keeps per cell: enough for any worker to rebuild it from the baseline."""
        return {optuna_attrs.CELL: self.key, optuna_attrs.CELL_LABEL: self.label,
                optuna_attrs.CELL_SEED: self.seed,
                optuna_attrs.CELL_SPEC_HASH: self.spec.spec_hash, optuna_attrs.CELL_ARM: self.arm,
                optuna_attrs.CELL_OVERRIDES: json.dumps(self.overrides, sort_keys=True),
                **({optuna_attrs.CELL_RUNG: self.rung} if self.rung is not None else {})}


@dataclass
class StudyPlan:
    spec: ExperimentSpec  # as loaded: the baseline plus its ablation section
    baseline: ExperimentSpec  # the baseline as a plain experiment (no study sections)
    cells: list[Cell]
    seeds: list[int]
    metric: str
    data: dict[str, Any]
    smap: SourceMap
    origin: str
    overrides: list[str] = field(default_factory=list)  # the --set overrides it was planned with
    optuna_name: str | None = None  # the Optuna study's name in the store (`bind`)
    arm: str = record.BASELINE_ARM  # an arm of the study (ablate/study/arms.py): its cells are the arm's
    rungs: list[Rung] = field(default_factory=list)  # a ladder's rungs in order of compute (ablation.scales)
    rung: str | None = None  # one rung's sub-plan (ablate/study/rung_rounds.py): its cells are the rung's

    @property
    def name(self) -> str:
        """The study's name: its MLflow experiment and the ``ablate.study`` tag of its runs."""
        return self.spec.tracking.experiment or self.spec.name

    @property
    def legacy_store_name(self) -> str:
        """The Optuna study's name before readable names (stores written then resume under it)."""
        return f"{self.spec.name}-{self.baseline.spec_hash}"

    @property
    def store_name(self) -> str:
        """The Optuna study of this plan: its readable name once `bind` looked at the store."""
        return self.optuna_name or self.legacy_store_name

    def bind(self, store: Store) -> str:
        """Find (or choose) this study's Optuna name in ``store`` (see ablate/study/study_names.py)."""
        self.optuna_name = study_names.resolve(store, self.name, self.baseline.spec_hash,
                                               self.legacy_store_name)
        return self.optuna_name

    def axis_params(self) -> dict[str, list[CategoricalChoiceType]]:
        """Every field some cell changes -> the values the cells give it (baseline's first), as Optuna
        categorical choices (lists and dicts as JSON text): each cell's trial records its values, so the
        dashboard's history, parallel-coordinate and importance views work for ablations too."""
        fields = list(dict.fromkeys(k for c in self.cells for k in c.overrides))
        choices: dict[str, list[CategoricalChoiceType]] = {}
        for c in self.cells:
            flat = flatten(c.spec.resolved())
            for f in fields:
                value = _choice(flat.get(f))
                values = choices.setdefault(short_field(f), [])
                if value not in values:
                    values.append(value)
        return choices

    def cell_params(self, cell: Cell) -> dict[str, CategoricalChoiceType]:
        flat = flatten(cell.spec.resolved())
        return {short_field(f): _choice(flat.get(f))
                for f in dict.fromkeys(k for c in self.cells for k in c.overrides)}

    @property
    def ablation(self) -> AblationSpec:
        """The spec's ablation section (a study plan always has one)."""
        assert self.spec.ablation is not None
        return self.spec.ablation

    @property
    def seed_step(self) -> int:
        """Seeds added per look of its sequential design; 1 without one (a fixed list's one look)."""
        seeds = self.ablation.seeds
        return seeds.step if self.design is not None and isinstance(seeds, SeedRange) else 1

    @property
    def direction(self) -> str:
        # metricnames' rule, the report's: a name guessed here from "loss" or "time" once read
        # val/steps_to_target as higher-is-better, so a tuned study picked the rate that reached it last
        return metricnames.direction(self.metric)

    @property
    def design(self) -> Design | None:
        """The sequential design when the seeds are a range (adaptive), else None (and for the confirm
        arm, which runs its fixed confirm.seeds)."""
        if self.arm == record.CONFIRM_ARM:
            return None
        abl = self.spec.ablation
        assert abl is not None
        return Design.from_spec(abl, self.family)

    @property
    def verdict_design(self) -> Design:
        """The design this plan's comparisons are decided by: its sequential one with a seed range, else
        one look at all its fixed seeds (ablate/stats/sequential.py `Design.from_spec`)."""
        abl = self.spec.ablation
        assert abl is not None
        return self.design or Design.one_look(abl, self.family, len(self.seeds))

    @property
    def family(self) -> int:
        """How many verdicts share the study's alpha (ablate/stats/verdict.py one_family), fixed before the
        first cell: with ablation.tune, each variant's own-best comparison joins its baseline's-settings
        one (all counted: which searches will move the settings is not known yet); on a ladder, every
        comparison at every rung (a rung's sub-plan keeps the whole ladder's family)."""
        abl = self.spec.ablation
        comparisons = len(self.variants) - 1
        tuned = abl is not None and abl.tune is not None
        return one_family(comparisons, comparisons if tuned else 0, rungs=len(self.rungs))

    @property
    def variants(self) -> list[str]:
        return list(dict.fromkeys(c.label for c in self.cells))

    def rebuild(self, attrs: Mapping[str, str | int]) -> Cell:
        """A cell the store holds but the plan does not list: an edited axis's, or a cell of a later arm
        (a variant at its own best; a confirmation cell, whose overrides apply to the larger setting)."""
        overrides = json.loads(str(attrs.get(optuna_attrs.CELL_OVERRIDES, "{}")))
        arm = str(attrs.get(optuna_attrs.CELL_ARM, record.BASELINE_ARM))
        data, smap, origin = self.data, self.smap, self.origin
        abl = self.spec.ablation
        if arm == record.CONFIRM_ARM and abl is not None and abl.confirm is not None:
            data, smap, origin = arm_settings.confirm_base(abl.confirm, self.data, self.smap, self.origin)
        spec = derive(data, smap, overrides, origin, seed=int(attrs[optuna_attrs.CELL_SEED]))
        rung = attrs.get(optuna_attrs.CELL_RUNG)
        return Cell(str(attrs.get(optuna_attrs.CELL_LABEL, spec.spec_hash)),
                    int(attrs[optuna_attrs.CELL_SEED]), spec, overrides,
                    arm=arm, rung=None if rung is None else str(rung))


def _choice(value: object) -> CategoricalChoiceType:
    """A value Optuna can hold as a categorical choice: None, bool, int, float, str; else JSON text."""
    if value is None or isinstance(value, bool | int | float | str):
        return value
    return json.dumps(value, sort_keys=True)


def short_field(field_path: str) -> str:
    # Components are the point of the tool: 'residual=post_norm' rather than 'model.residual=post_norm'.
    return field_path[len("model."):] if field_path.startswith("model.") else field_path
