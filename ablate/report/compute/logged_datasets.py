"""The datasets the runs of a study logged as MLflow inputs (name and digest), grouped by digest: listed
per seed or variant when the runs did not all see the same data.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ablate.tracking.read import dataset_inputs

if TYPE_CHECKING:
    from ablate.report.compute.loaded_study import Run, Study

RunDatasets = tuple[tuple[str, str], ...]  # sorted (dataset name, digest) pairs of one run


def _whole_seeds(runs: Sequence[Run], everyone: Sequence[Run]) -> bool:
    """The group is every run of its seeds: each of those seeds' variants saw this digest."""
    seeds = {r.seed for r in runs}
    return {r.run_id for r in runs} == {r.run_id for r in everyone if r.seed in seeds}


def _cells(runs: Sequence[Run], everyone: Sequence[Run]) -> str:
    """The runs of one digest group in few words: 'every run', 'seeds 0, 1' (every variant of those
    seeds), else 'variant (seeds ...)' per variant."""
    if len(runs) == len(everyone):
        return "every run"
    seeds = sorted({r.seed for r in runs})
    if _whole_seeds(runs, everyone):
        return ("seed " if len(seeds) == 1 else "seeds ") + ", ".join(map(str, seeds))
    by_variant: dict[str, list[int]] = {}
    for r in runs:
        by_variant.setdefault(r.variant, []).append(r.seed)
    return "; ".join(f"{v} (seed{'s' * (len(s) > 1)} {', '.join(map(str, sorted(s)))})"
                     for v, s in by_variant.items())


@dataclass(frozen=True)
class DatasetRow:
    """One dataset, or one of its digests when the runs did not all see the same one."""

    name: str
    digest: str
    who: str | None  # the runs that saw this digest, in few words; None when every run saw it
    by_seed: bool = True  # every variant of its seeds saw this digest (a seed's pairs share their data)

    @property
    def text(self) -> str:
        shown = f"{self.name} (digest `{self.digest}`)"
        return shown if self.who is None else f"{shown}: {self.who}"


def dataset_rows(runs: Sequence[Run], inputs_of: Callable[[str], RunDatasets]) -> list[DatasetRow]:
    """One row per dataset name when every run saw the same digest, else one row per distinct digest
    naming the seeds or variants that saw it (``inputs_of(run_id)`` gives a run's sorted (name, digest)
    pairs). Runs that logged no dataset (older records) are left out."""
    seen = {r.run_id: inputs_of(r.run_id) for r in runs}
    logged = [r for r in runs if seen[r.run_id]]
    names = sorted({name for pairs in seen.values() for name, _ in pairs})
    rows = []
    for name in names:
        groups: dict[str, list[Run]] = {}
        for r in logged:
            for digest in sorted({d for n, d in seen[r.run_id] if n == name}):
                groups.setdefault(digest, []).append(r)
        if len(groups) == 1:
            rows.append(DatasetRow(name, next(iter(groups)), None))
            continue
        for digest, members in sorted(groups.items(), key=lambda g: (min(r.seed for r in g[1]), g[0])):
            rows.append(DatasetRow(name, digest, _cells(members, logged), _whole_seeds(members, logged)))
    return rows


def data_note(rows: Sequence[DatasetRow]) -> tuple[str, str] | None:
    """(kind, text) of the Setup note on the data, None when every run saw the same: a warning when the
    variants of one seed saw different data (a paired comparison then measures the data as well), else
    an info note that each seed drew its own data (a task generated from the run seed) and the variants of
    a seed shared it."""
    if all(r.who is None for r in rows):
        return None
    if all(r.by_seed for r in rows):
        return ("info", "each seed trained on its own data (the dataset digests differ between seeds, not "
                "between the variants of a seed, as with a task generated from the run seed): the runs "
                "a comparison pairs by seed saw the same data (per seed in the Data table at the end).")
    return ("warning", "the runs did not all train on the same data: the variants of a seed saw different "
            "dataset digests, so a comparison paired by seed measures the data as well (listed per group in "
            "the Data table at the end).")


def study_dataset_rows(study: Study) -> list[DatasetRow]:
    """``dataset_rows`` of every run of the study, read from MLflow."""
    def inputs_of(run_id: str) -> RunDatasets:
        return tuple(sorted({(name, digest) for name, digest, _ in dataset_inputs(run_id)}))

    return dataset_rows(study.runs, inputs_of)
