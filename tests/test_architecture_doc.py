"""docs/architecture.md and the package docstrings are the map of the code: every module they name exists,
and every package's docstring names every module it holds."""

from __future__ import annotations

import ast
import importlib
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "architecture.md"
PACKAGES = sorted(p.parent for p in ROOT.joinpath("ablate").rglob("__init__.py") if p.parent.name != "ablate")

# `report/compute/statistics.py`, `ablate/stats/verdict.py`, `registry/rope.py`, `tests/study/test_arms.py`
_PATH = re.compile(r"(?<![\w/])((?:ablate/|registry/|tests/|scripts/|docs/)?[\w/]+\.(?:py|md))\b")
_DOTTED = re.compile(r"(?<![\w.])(ablate(?:\.\w+)+)")
_LAYERS = ("spec", "data", "engine", "tracking", "run", "stats", "study", "launch", "report", "bench")


def doc_paths(text: str) -> list[str]:
    """The file paths a text names, each as a path from the repository's root."""
    out = []
    for found in _PATH.findall(text):
        if found.split("/")[0] in _LAYERS:  # `report/build.py`: a path inside ablate/
            found = f"ablate/{found}"
        if "/" in found:
            out.append(found)
    return sorted(set(out))


def resolves(dotted: str) -> bool:
    """A dotted name is a module, or an attribute of the longest module it starts with."""
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            module = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        obj: object = module
        for name in parts[cut:]:
            if not hasattr(obj, name):
                return False
            obj = getattr(obj, name)
        return True
    return False


def test_every_module_is_named_in_the_architecture_doc() -> None:
    """The map is whole: every module of ablate/ appears on docs/architecture.md by its path (in full or
    from its package: `study/train_cells.py`), or, in the module map, by its file name under its package."""
    text = DOC.read_text()
    named = set(doc_paths(text))
    modules = [p.relative_to(ROOT).as_posix() for p in ROOT.joinpath("ablate").rglob("*.py")
               if p.name != "__init__.py"]
    unnamed = [m for m in sorted(modules) if m not in named and f"`{Path(m).name}`" not in text]
    assert unnamed == []


def test_every_file_the_architecture_doc_names_exists() -> None:
    missing = [p for p in doc_paths(DOC.read_text()) if not (ROOT / p).exists()]
    assert missing == []


def test_every_dotted_name_the_architecture_doc_names_resolves() -> None:
    """Module paths only: ``ablate.status`` and its kin are MLflow tags (ablate/tracking/record.py)."""
    code = (*_LAYERS, "errors", "dburl", "hardware", "cli")
    names = sorted({n.rstrip(".") for n in _DOTTED.findall(DOC.read_text()) if n.split(".")[1] in code})
    assert [n for n in names if not resolves(n)] == []


def test_a_missing_path_is_found() -> None:
    assert doc_paths("see `report/build.py` and `ablate/stats/verdict.py`, `registry/x.py`, plain.py") == [
        "ablate/report/build.py", "ablate/stats/verdict.py", "registry/x.py"]
    assert resolves("ablate.stats.verdict.read") and not resolves("ablate.report.stats")


@pytest.mark.parametrize("package", PACKAGES, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_every_package_docstring_names_its_modules(package: Path) -> None:
    """A package's docstring says what it owns: each of its modules (and subpackages) by name."""
    doc = ast.get_docstring(ast.parse((package / "__init__.py").read_text())) or ""
    modules = [p.stem for p in package.glob("*.py") if p.stem != "__init__"]
    modules += [p.parent.name for p in package.glob("*/__init__.py")]
    unnamed = [m for m in sorted(modules) if not re.search(rf"(``|`|\.|/){m}(``|`|/|\b)", doc)]
    assert unnamed == [], f"{package.relative_to(ROOT)}: its docstring does not name these modules"
