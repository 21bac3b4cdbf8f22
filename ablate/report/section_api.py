"""What one report section hands the assembler (``Part``), and what every section may read (``Inputs``).

A section is a function ``Inputs -> Part | None`` in a module of ``ablate/report/sections/`` named for its
concept, registered where it is defined by :func:`section` with its place in the report and the reports
(ablation, search) it belongs to. It returns its own blocks and its own numbers; ``ablate.report.build``
only puts the registered parts in order (:func:`parts`), renders their blocks and merges their data into
``report.json``. No section writes into another's data, and the report's exit status is read from
``Part.failed``, never from the wording of a line. Adding a section is one module and one test
(docs/architecture.md, "Adding a report section").
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any, Literal, TypeVar

from ablate.report.compute.bounds import AtBound, at_bounds, bound_suffix
from ablate.report.compute.contrasts import FactorialRow, factorial_effects
from ablate.report.compute.loaded_study import EffectRow, Study, effects
from ablate.report.compute.logged_datasets import DatasetRow, study_dataset_rows
from ablate.report.compute.run_counts import VariantSummary, summarise
from ablate.report.render import Block, Section

T = TypeVar("T")
ReportKind = Literal["ablation", "search"]
SECTIONS_PACKAGE = "ablate.report.sections"


@dataclass
class Part:
    """One section's contribution to a report.

    ``intro`` blocks open the report (before the first section), in the order of the parts; ``sections``
    follow in the same order. ``data`` goes into ``report.json`` at its top level: two parts never share
    a key (the assembler refuses it). ``failed``: the section could not be made from the study's records;
    the report is still written, and ``ablate report`` exits 1.
    """

    name: str
    sections: list[Section] = field(default_factory=list)
    intro: list[Block] = field(default_factory=list)
    data: dict[str, Any] = field(default_factory=dict)
    failed: bool = False


@dataclass
class Inputs:
    """The study and what several sections derive from it, each computed once, on first use."""

    study: Study
    fig_dir: Path  # figures are written here and referred to as ``figures/<name>.png``

    @cached_property
    def bounds(self) -> list[AtBound]:
        """The primary metric at its floor or ceiling, per variant (warnings, and a caveat on verdicts)."""
        return at_bounds(self.study, self.study.primary)

    @cached_property
    def effects(self) -> list[EffectRow]:
        """Each variant against the baseline; a verdict on the primary metric carries the bounds caveat."""
        rows = effects(self.study)
        for r in rows:
            if r.metric == self.study.primary:
                r.verdict += bound_suffix(self.bounds, r.variant, self.study.baseline)
        return rows

    _derived: dict[Any, Any] = field(default_factory=dict, repr=False)

    def derived(self, compute: Callable[[Study], T]) -> T:
        """``compute(study)``, once per report, for what several sections read and no ``Inputs`` property
        holds (``ablate.report.compute.arm_verdicts.twice`` and ``transfers``)."""
        if compute not in self._derived:
            self._derived[compute] = compute(self.study)
        return self._derived[compute]  # type: ignore[no-any-return]

    @cached_property
    def factorial(self) -> list[FactorialRow]:
        return factorial_effects(self.study)

    @cached_property
    def summary(self) -> dict[str, VariantSummary]:
        """Per variant: run counts by status and each metric's mean and interval (``data.summarise``)."""
        return summarise(self.study)

    @cached_property
    def datasets(self) -> list[DatasetRow]:
        """The datasets the runs logged, grouped by digest (read from MLflow once)."""
        return study_dataset_rows(self.study)


PartFn = Callable[[Inputs], Part | None]


@dataclass(frozen=True)
class Registered:
    """A section as registered: its function, its place (smaller first) and the reports that show it."""

    name: str  # 'main_table.axes_part': module (under ablate/report/sections/) and function
    fn: PartFn
    place: int
    reports: tuple[ReportKind, ...]


_REGISTERED: dict[str, Registered] = {}


F = TypeVar("F", bound=PartFn)


def section(place: int, reports: tuple[ReportKind, ...] = ("ablation",)) -> Callable[[F], F]:
    """Register a section's ``part`` function at ``place`` in each of ``reports`` (a part's intro blocks open
    the report in the same order). Two sections at one place of one report are an error."""
    def add(fn: F) -> F:
        name = f"{fn.__module__.removeprefix(SECTIONS_PACKAGE + '.')}.{fn.__name__}"
        taken = [r.name for r in _REGISTERED.values()
                 if r.place == place and set(r.reports) & set(reports) and r.name != name]
        if taken:
            raise ValueError(f"report section {name} at place {place}, already {taken[0]}'s")
        _REGISTERED[name] = Registered(name, fn, place, reports)
        return fn
    return add


def registered() -> list[Registered]:
    """Every section of ``ablate/report/sections/`` (each module imported once), by place."""
    package = importlib.import_module(SECTIONS_PACKAGE)
    for module in pkgutil.iter_modules(package.__path__):
        importlib.import_module(f"{SECTIONS_PACKAGE}.{module.name}")
    return sorted(_REGISTERED.values(), key=lambda r: (r.place, r.name))


def parts(kind: ReportKind) -> tuple[PartFn, ...]:
    """The part functions of a report of ``kind``, top to bottom."""
    return tuple(r.fn for r in registered() if kind in r.reports)
