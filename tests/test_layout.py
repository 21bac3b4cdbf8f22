"""DESIGN.md's layout rules, checked on the source: which package may import what.

mlflow is imported only inside ``ablate/tracking/``, optuna only inside ``ablate/tune/``, the registry
imports nothing from ``ablate``, and no module of the framework passes ~400 lines by far.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SOURCES = sorted([*ROOT.joinpath("ablate").rglob("*.py"), *ROOT.joinpath("registry").rglob("*.py")])


def imported_roots(path: Path) -> set[str]:
    """Top-level names of every module `path` imports, at module level or inside functions."""
    roots: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            roots.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            roots.add(node.module.split(".")[0])
    return roots


def test_the_sources_are_found() -> None:
    names = {p.relative_to(ROOT).as_posix() for p in SOURCES}
    assert {"ablate/tracking/__init__.py", "ablate/tune/__init__.py", "registry/__init__.py"} <= names


@pytest.mark.parametrize(("library", "home"), [("mlflow", "ablate/tracking/"), ("optuna", "ablate/tune/")])
def test_a_library_is_imported_only_in_its_package(library: str, home: str) -> None:
    outside = [p.relative_to(ROOT).as_posix() for p in SOURCES
               if library in imported_roots(p) and not p.relative_to(ROOT).as_posix().startswith(home)]
    assert outside == [], f"{library} imported outside {home}"


def test_registry_does_not_import_the_framework() -> None:
    offenders = [p.name for p in ROOT.joinpath("registry").rglob("*.py") if "ablate" in imported_roots(p)]
    assert offenders == []


def test_no_module_is_far_over_the_size_budget() -> None:
    sizes = {p.relative_to(ROOT).as_posix(): len(p.read_text().splitlines()) for p in SOURCES}
    assert {name: n for name, n in sizes.items() if n > 450} == {}
