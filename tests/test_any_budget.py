"""How many function signatures of ``ablate/study/`` and ``ablate/report/`` still say ``Any``: at most 10%.

What a study knows crosses to its report typed (docs/architecture.md, "The study's record"): a spec section
is its pydantic model, the record a ``StudyRecord``, a report helper's result a dataclass. ``Any`` turns
mypy off for whatever it touches, so it is kept to the few places that take a library's untyped object
(an MLflow frame's row, an Optuna trial's attribute). A value that may be anything and is only shown,
compared or passed on is an ``object``, which mypy still checks.

A signature counts when any of its parameter or return annotations names ``Any`` (``typing.Any`` too), or
a module-level alias of ``ablate/`` whose definition does (``JsonObject = dict[str, Any]``), so that an
alias cannot hide one. Every ``def`` counts, methods and nested functions included.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
BUDGET = 0.10  # the share of a package's signatures that may name Any
PACKAGES = ("study", "report")


def _names_any(node: ast.AST, aliases: set[str]) -> bool:
    for n in ast.walk(node):
        if isinstance(n, ast.Name) and (n.id == "Any" or n.id in aliases):
            return True
        if isinstance(n, ast.Attribute) and n.attr == "Any":
            return True
        if isinstance(n, ast.Constant) and isinstance(n.value, str):  # a quoted annotation
            try:
                if _names_any(ast.parse(n.value, mode="eval"), aliases):
                    return True
            except SyntaxError:
                continue
    return False


def any_aliases(root: Path) -> set[str]:
    """Module-level names of ``root`` bound to a type that names Any (``X = dict[str, Any]``)."""
    aliases: set[str] = set()
    for path in root.rglob("*.py"):
        for stmt in ast.parse(path.read_text(), str(path)).body:
            if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1:
                target, value = stmt.targets[0], stmt.value
            elif isinstance(stmt, ast.AnnAssign) and stmt.value is not None:
                target, value = stmt.target, stmt.value
            else:
                continue
            typelike = isinstance(value, ast.Subscript | ast.BinOp | ast.Name | ast.Attribute)
            if isinstance(target, ast.Name) and typelike and _names_any(value, set()):
                aliases.add(target.id)
    return aliases


def signatures(package: Path, aliases: set[str]) -> tuple[list[str], int]:
    """(the signatures naming Any as 'path:line name', how many signatures) in ``package``."""
    named, total = [], 0
    for path in sorted(package.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            total += 1
            a = node.args
            params = [*a.posonlyargs, *a.args, *a.kwonlyargs, *(x for x in (a.vararg, a.kwarg) if x)]
            annotations = [p.annotation for p in params if p.annotation is not None]
            if node.returns is not None:
                annotations.append(node.returns)
            if any(_names_any(ann, aliases) for ann in annotations):
                named.append(f"{path.relative_to(package.parents[1])}:{node.lineno} {node.name}")
    return named, total


def test_an_alias_of_any_counts_as_any(tmp_path: Path) -> None:
    (tmp_path / "m.py").write_text(
        "from typing import Any\nLoose = dict[str, Any]\nTight = dict[str, int]\n\n"
        "def a(x: Loose) -> None: ...\ndef b(x: Tight) -> 'Any': ...\n"
        "def c(x: Tight) -> object: ...\ndef d(x: typing.Any) -> None: ...\n")
    aliases = any_aliases(tmp_path)
    assert aliases == {"Loose"}
    named, total = signatures(tmp_path, aliases)
    assert total == 4
    assert [n.split(" ")[1] for n in named] == ["a", "b", "d"]


@pytest.mark.parametrize("package", PACKAGES)
def test_at_most_a_tenth_of_the_signatures_name_any(package: str) -> None:
    named, total = signatures(ROOT / "ablate" / package, any_aliases(ROOT / "ablate"))
    assert total > 100, f"ablate/{package} has only {total} functions: the walk missed the package"
    assert len(named) <= BUDGET * total, (
        f"ablate/{package}: {len(named)} of {total} signatures ({len(named) / total:.0%}) name Any, over "
        f"the {BUDGET:.0%} budget; type these (a spec section's model, the StudyRecord, a dataclass, or "
        f"object for a value only shown or passed on):\n" + "\n".join(named))
