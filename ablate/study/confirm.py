"""The cells that check a study's verdicts at a larger scale (``ablation.confirm``): the
baseline and each variant whose comparison the study decided, at the larger setting (``confirm.overrides``
over the spec, or ``confirm.spec``), on ``confirm.seeds``: every variant's cell of a seed beside the
baseline's of the same seed, so that ablate/report/compute/scale_outcomes.py compares them paired by seed.

Each runs with the settings its verdict was measured at: the variant's own fields, plus its best tuning
values when the study tuned every variant (``settings``). Which comparisons count as decided is
ablate/study/arms.py's business; the cells are ordinary cells with their own hashes (tagged as the confirm
arm), so the study runs, resumes and records them as it does its own.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from ablate.study.arm_settings import best_overrides, confirm_base
from ablate.study.derived_specs import derive
from ablate.study.designs import spec_diff
from ablate.study.study_plan import Cell, StudyPlan
from ablate.tracking import record


def confirm_seeds(plan: StudyPlan) -> list[int]:
    abl = plan.spec.ablation
    assert abl is not None and abl.confirm is not None
    return abl.confirm.seed_list(plan.spec.seed)


def confirm_cells(plan: StudyPlan, decided: Sequence[str],
                  settings: Mapping[str, Mapping[str, object]] | None = None) -> list[Cell]:
    """Seed-major cells at the larger setting: the baseline, then each decided variant (in the plan's
    order), each with its ``settings`` (label -> tuning values; none: the baseline's settings). A label the
    plan does not have is a ValueError."""
    abl = plan.spec.ablation
    assert abl is not None and abl.confirm is not None
    overrides = {c.label: dict(c.overrides) for c in plan.cells if c.seed == plan.seeds[0]}
    unknown = [label for label in decided if label not in overrides]
    if unknown:
        raise ValueError(f"no variant {unknown[0]!r} in study {plan.name}")
    chosen = ["baseline", *[label for label in overrides if label in decided and label != "baseline"]]
    own = {label: best_overrides(overrides[label], (settings or {}).get(label, {})) for label in chosen}
    data, where, origin = confirm_base(abl.confirm, plan.data, plan.smap, plan.origin)
    cells = []
    for seed in confirm_seeds(plan):
        base = derive(data, where, own["baseline"], origin, seed=seed)
        for label in chosen:
            spec = derive(data, where, own[label], origin, seed=seed)
            cells.append(Cell(label, seed, spec, own[label], spec_diff(base, spec), arm=record.CONFIRM_ARM))
    return cells
