"""Every dotted name a docstring of ablate/ or registry/ mentions still names something: a module, or a name
inside one (``ablate.report.compute.arm_verdicts.twice``, ``stats.pairing.paired_differences``). A module or
function renamed or moved leaves no stale pointer behind in the prose that explains the code.

A name counts when it starts with ``ablate.`` and a package, with ``registry.``, or with a package of
ablate that is not also a spec section (``report.``, ``study.``, ``stats.``, ``engine.``, ...):
``data.cache_dir`` and ``tracking.uri`` are spec fields, ``ablate.metric`` a tag, ``spec.seed`` a spec's
field, none of them code.
"""

from __future__ import annotations

import ast
import importlib
import re
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("spec", "data", "engine", "tracking", "run", "stats", "study", "launch", "report", "bench")
# package names a docstring also uses for other things: spec sections (data.source) and a spec (spec.seed)
AMBIGUOUS = ("data", "tracking", "spec")
LEAVES = ("cli", "errors", "hardware", "dburl")
BARE = [p for p in PACKAGES if p not in AMBIGUOUS]
DOTTED = re.compile(r"(?<![\w./-])((?:ablate\.(?:" + "|".join(PACKAGES + LEAVES) + r")|registry|"
                    + "|".join(BARE) + r")(?:\.[A-Za-z_]\w*)+)")
FILE_ENDINGS = (".py", ".yaml", ".json", ".md", ".html", ".csv", ".txt", ".png")


def docstrings(path: Path) -> Iterator[tuple[int, str]]:
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            text = ast.get_docstring(node, clean=False)
            if text:
                yield getattr(node, "lineno", 1), text


def mentioned(text: str) -> list[str]:
    names = (m.group(1) for m in DOTTED.finditer(text))
    return [n for n in names if not n.endswith(FILE_ENDINGS)]


def resolves(name: str) -> bool:
    """Whether ``name`` (``ablate.`` implied for a bare package) is a module or a name inside one."""
    parts = name.split(".")
    parts = parts if parts[0] in ("ablate", "registry") else ["ablate", *parts]
    for k in range(len(parts), 0, -1):
        try:
            found: object = importlib.import_module(".".join(parts[:k]))
        except ImportError:
            continue
        for attr in parts[k:]:
            if hasattr(found, attr):
                found = getattr(found, attr)
            elif isinstance(found, ModuleType) and hasattr(found, "__path__"):  # a submodule not imported yet
                try:
                    found = importlib.import_module(f"{found.__name__}.{attr}")
                except ImportError:
                    return False
            else:
                return False
        return True
    return False


SOURCES = sorted([*ROOT.joinpath("ablate").rglob("*.py"), *ROOT.joinpath("registry").rglob("*.py")])


def test_names_are_found_and_told_from_fields_and_tags() -> None:
    text = "see ``ablate.stats.verdict.read`` and report.arms.twice, not data.cache_dir, ablate.metric"
    assert mentioned(text + ", spec.seed, report.html") == ["ablate.stats.verdict.read", "report.arms.twice"]
    assert resolves("ablate.stats.verdict.read") and resolves("stats.pairing.paired_differences")
    assert resolves("ablate.report.sections.trials")  # a module its package does not import
    assert not resolves("report.arms.twice") and not resolves("ablate.stats.verdict.paired_differences")


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_every_dotted_name_in_a_docstring_resolves(path: Path) -> None:
    stale = [f"{path.relative_to(ROOT)}:{line}: {name}" for line, text in docstrings(path)
             for name in mentioned(text) if not resolves(name)]
    assert stale == []
