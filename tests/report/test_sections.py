"""The report's sections declare themselves (ablate/report/section_api.py ``section``): every module of
ablate/report/sections/ registers a part, each at its own place in each report, and the reports show them
in the order the committed reports have them."""

from __future__ import annotations

import pkgutil

import pytest

from ablate.report import build, section_api, sections
from ablate.report.section_api import Inputs, Part, registered, section

# the order of the committed reports' sections (tests/report/test_committed_reports.py rebuilds them)
ABLATION = ["ladder_verdicts.part", "fair_ladder.part", "speedup_table.part", "setup.part",
            "forest_plot.part", "published.part", "summary.part", "mde.part", "main_table.axes_part",
            "main_table.part", "downstream.part", "seeds.part", "own_best.part", "reaching_target.part",
            "tuning_budget.part", "larger_scale.part", "sampling.part", "factorial.part", "curves.part",
            "lengths.part", "costs.part", "compute_hours.part", "failures.part", "attention_maps.part",
            "environment.part",
            "withdrawn.part"]
SEARCH = ["setup.part", "trials.part", "failures.part", "attention_maps.part", "environment.part"]


def _names(kind: section_api.ReportKind) -> list[str]:
    return [r.name for r in registered() if kind in r.reports]


def test_every_section_module_registers_a_part() -> None:
    modules = {m.name for m in pkgutil.iter_modules(sections.__path__)}
    assert len(modules) >= 22 and modules == {r.name.split(".")[0] for r in registered()}


def test_the_reports_show_their_sections_in_order() -> None:
    assert _names("ablation") == ABLATION and _names("search") == SEARCH
    assert [r.fn for r in registered() if "ablation" in r.reports] == list(build.ABLATION_PARTS)


def test_each_place_of_a_report_holds_one_section() -> None:
    for kind in ("ablation", "search"):
        places = [r.place for r in registered() if kind in r.reports]
        assert len(places) == len(set(places))


def test_a_second_section_at_a_taken_place_is_refused() -> None:
    def part(inp: Inputs) -> Part | None:
        return None

    part.__module__ = "ablate.report.sections.newcomer"
    with pytest.raises(ValueError, match="report section newcomer.part at place 20, already setup.part's"):
        section(20, ("search",))(part)
