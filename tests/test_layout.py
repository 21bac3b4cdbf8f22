"""The layout rules of docs/architecture.md, checked on the source: which package may import what.

The packages of ``ablate`` form layers, each importing only the ones below it: ``spec -> data -> engine
-> tracking -> run -> stats -> study -> launch -> report -> bench -> cli``, with the leaf modules
``ablate.errors``, ``ablate.dburl`` and ``ablate.hardware`` usable by all. The statistics floor
(``stats``) imports only ``spec`` (and numpy/scipy), the report nothing of ``launch``; mlflow is imported
only inside ``ablate/tracking/``, optuna only inside ``ablate/study/``, the registry imports nothing from
``ablate``, no two modules import each other (directly or round a longer circle), and no module of the
framework passes ~400 lines by far. """

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SOURCES = sorted([*ROOT.joinpath("ablate").rglob("*.py"), *ROOT.joinpath("registry").rglob("*.py")])
SOURCE_MODULES = {".".join(p.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")
                  for p in SOURCES}

# Bottom to top: a package may import the packages before it in this list, and itself.
LAYERS = ("spec", "data", "engine", "tracking", "run", "stats", "study", "launch", "report", "bench", "cli")
LEAVES = ("errors", "dburl", "hardware")  # single modules that import no other layer: usable by all
TOP = ("__init__", "__main__", "cli")  # the command and the package's lazy public names


def imported_roots(path: Path) -> set[str]:
    """Top-level names of every module `path` imports, at module level or inside functions."""
    return {name.split(".")[0] for name in imported_modules(path)}


def imported_modules(path: Path) -> set[str]:
    """Dotted names of every module `path` imports (``from a.b import c``: ``a.b`` and ``a.b.c``)."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            # ``from a.b import c`` of a module c depends on a.b.c; of a name inside a.b, on a.b
            subs = {f"{node.module}.{alias.name}" for alias in node.names}
            names.update(subs)
            if not subs <= SOURCE_MODULES:
                names.add(node.module)
    return names


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__" and len(parts) > 1:
        parts.pop()
    return ".".join(parts)


def layer_of(module: str) -> str:
    """'ablate.engine.trainer' -> 'engine'; 'ablate.errors' -> 'errors'; 'ablate.cli' -> 'cli'."""
    parts = module.split(".")
    if len(parts) == 1:
        return "__init__"
    return parts[1]


MODULES = {module_name(p): p for p in SOURCES if p.parts[-2:] != ("ablate", "__init__.py")}


def framework_imports(path: Path) -> set[str]:
    """The ablate modules (files, not names inside them) that `path` imports."""
    return {m for m in imported_modules(path) if m in MODULES and m.startswith("ablate.")}


def test_the_sources_are_found() -> None:
    names = {p.relative_to(ROOT).as_posix() for p in SOURCES}
    assert {"ablate/tracking/__init__.py", "ablate/study/__init__.py", "registry/__init__.py"} <= names
    packages = {p.parent.name for p in ROOT.joinpath("ablate").glob("*/__init__.py")}
    assert packages == set(LAYERS) - {"cli"}, "a package that is not in LAYERS (or a layer without package)"


@pytest.mark.parametrize(("library", "home"), [("mlflow", "ablate/tracking/"), ("optuna", "ablate/study/")])
def test_a_library_is_imported_only_in_its_package(library: str, home: str) -> None:
    outside = [p.relative_to(ROOT).as_posix() for p in SOURCES
               if library in imported_roots(p) and not p.relative_to(ROOT).as_posix().startswith(home)]
    assert outside == [], f"{library} imported outside {home}"


def test_registry_does_not_import_the_framework() -> None:
    offenders = [p.name for p in ROOT.joinpath("registry").rglob("*.py") if "ablate" in imported_roots(p)]
    assert offenders == []


def test_every_package_imports_only_the_layers_below_it() -> None:
    rank = {name: i for i, name in enumerate(LAYERS)}
    upward = []
    for module, path in MODULES.items():
        if not module.startswith("ablate."):
            continue
        mine = layer_of(module)
        if mine in TOP:
            continue
        for target in framework_imports(path):
            theirs = layer_of(target)
            if theirs in LEAVES:
                continue
            if mine in LEAVES or theirs in TOP or rank[theirs] > rank[mine]:
                upward.append(f"{module} -> {target}")
    assert upward == [], "imports that reach up the layers"


# Packages held to fewer layers than the order allows (besides themselves and the leaf modules).
NARROWER = {"stats": {"spec"}, "report": set(LAYERS[:LAYERS.index("report")]) - {"launch"}}
THIRD_PARTY = {"stats": {"numpy", "scipy", "math", "json", "collections", "dataclasses", "enum", "functools",
                         "typing", "itertools", "statistics", "__future__"}}


@pytest.mark.parametrize("package", sorted(NARROWER))
def test_a_narrow_package_imports_only_what_it_may(package: str) -> None:
    allowed = NARROWER[package] | {package} | set(LEAVES)
    wrong = [f"{m} -> {t}" for m, p in MODULES.items() if layer_of(m) == package and m.startswith("ablate.")
             for t in framework_imports(p) if layer_of(t) not in allowed]
    libraries = THIRD_PARTY.get(package)
    if libraries is not None:
        mine = [(m, p) for m, p in MODULES.items() if layer_of(m) == package and m.startswith("ablate.")]
        wrong += [f"{m} -> {r}" for m, p in mine for r in imported_roots(p)
                  if r not in libraries | {"ablate"}]
    assert wrong == []


def test_no_module_imports_round_a_circle() -> None:
    graph = {m: framework_imports(p) - {m} for m, p in MODULES.items()}
    cycles: list[list[str]] = []
    state: dict[str, int] = {}  # 1: on the current path, 2: done

    def visit(node: str, path: list[str]) -> None:
        state[node] = 1
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                cycles.append(path[path.index(nxt):] + [nxt])
            elif nxt not in state:
                visit(nxt, [*path, nxt])
        state[node] = 2

    for start in sorted(graph):
        if start not in state:
            visit(start, [start])
    assert cycles == []


# Where the names ablate writes to MLflow and Optuna are declared; everywhere else reads them from there.
NAME_SCHEMAS = ("ablate.tracking.record", "ablate.study.optuna_attrs")
_NAME = re.compile(r"(tags\.|params\.|metrics\.)?ablate\.[a-z_]+(\.[a-z_]*)?")


def inline_names(source: str, where: str, pattern: re.Pattern[str] | None = None) -> list[str]:
    """``"ablate.…"`` strings in code (not docstrings) that name no module: MLflow or Optuna names (or
    the strings ``pattern`` matches in full)."""
    tree = ast.parse(source, where)
    docstrings = {id(node.body[0].value) for node in ast.walk(tree)
                  if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)
                  and node.body and isinstance(node.body[0], ast.Expr)
                  and isinstance(node.body[0].value, ast.Constant)}
    found = []
    for node in ast.walk(tree):
        if (isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings
                and (pattern or _NAME).fullmatch(node.value) and node.value not in MODULES):
            found.append(f"{where}:{node.lineno}: {node.value!r}")
    return sorted(found)


def test_mlflow_and_optuna_names_are_written_through_their_declared_constants() -> None:
    """A tag, param, metric or Optuna attribute named inline would drift from the schema readers use."""
    found = [hit for m, p in MODULES.items() if m.startswith("ablate.") and m not in NAME_SCHEMAS
             for hit in inline_names(p.read_text(), str(p.relative_to(ROOT)))]
    assert found == []


def test_an_inline_name_is_found() -> None:
    probe = ('"""ablate.status in a docstring is prose."""\nTAGS = {"ablate.status": 1}\n'
             'MODULE = "ablate.tracking"\nCOLUMN = "tags.ablate.cell"\nPREFIX = "ablate.version."\n')
    assert inline_names(probe, "p.py") == ["p.py:2: 'ablate.status'", "p.py:4: 'tags.ablate.cell'",
                                           "p.py:5: 'ablate.version.'"]


# Every metric name a run reports is declared in ablate/spec/metricnames.py; everywhere else reads it.
METRIC_SCHEMA = "ablate.spec.metricnames"
_METRIC = re.compile(r"(final/)?(train|val|test|model|data)/[a-z_]+|peak_memory_mb|run_memory_mb")


def test_metric_names_are_written_through_their_declared_constants() -> None:
    """A metric named inline ("val/loss") would drift from the declaration specs are checked against."""
    found = [hit for m, p in MODULES.items() if m.startswith("ablate.") and m != METRIC_SCHEMA
             for hit in inline_names(p.read_text(), str(p.relative_to(ROOT)), _METRIC)]
    assert found == []


def test_an_inline_metric_name_is_found() -> None:
    probe = ('"""val/loss in a docstring is prose."""\nCOLS = ("val/loss", "peak_memory_mb")\n'
             'LABEL = f"val/{name}"\nPATH = "val/loss.png"\n')
    assert inline_names(probe, "p.py", _METRIC) == ["p.py:2: 'peak_memory_mb'", "p.py:2: 'val/loss'"]


def test_no_module_is_far_over_the_size_budget() -> None:
    sizes = {p.relative_to(ROOT).as_posix(): len(p.read_text().splitlines()) for p in SOURCES}
    assert {name: n for name, n in sizes.items() if n > 450} == {}


# The packages whose module names a reader must tell apart by name alone (docs/architecture.md).
NAMED_APART = ("report", "study", "tracking", "stats", "launch")


def named_apart() -> dict[str, list[str]]:
    """{module's own name: its dotted names} over the report, study and tracking packages (no __init__)."""
    names: dict[str, list[str]] = {}
    for module, path in MODULES.items():
        parts = module.split(".")
        if len(parts) > 2 and parts[1] in NAMED_APART and path.name != "__init__.py":
            names.setdefault(parts[-1], []).append(module)
    return names


def _stem(name: str) -> str:
    """'tuned', 'tuning', 'tune' -> 'tun'; 'arms' -> 'arm'."""
    return re.sub(r"(ing|ed|es|e|s)$", "", name)


def near_homonyms(names: list[str]) -> list[tuple[str, str]]:
    """Pairs told apart only by a prefix, a suffix or an ending: scale / at_scale, tuned / tuning."""
    pairs = []
    for a in names:
        for b in names:
            if a < b and _stem(a) == _stem(b):
                pairs.append((a, b))
            elif a != b and (b.startswith(a + "_") or b.endswith("_" + a)):
                pairs.append((a, b))
    return sorted(pairs)


def test_no_module_name_repeats_across_report_study_and_tracking() -> None:
    assert {name: where for name, where in named_apart().items() if len(where) > 1} == {}


def test_no_two_modules_are_told_apart_only_by_a_prefix_or_suffix() -> None:
    assert near_homonyms(sorted(named_apart())) == []


def test_a_near_homonym_is_found() -> None:
    assert near_homonyms(["at_scale", "scale", "tuned", "tuning", "arms", "arm", "plan"]) == [
        ("arm", "arms"), ("scale", "at_scale"), ("tuned", "tuning")]


def test_the_reports_sections_read_only_its_computations() -> None:
    """Only report/compute/ reads the study and statistics floors; the sections and the assembler read what
    it computed (docs/architecture.md, "Adding a report section")."""
    reach = [f"{m} -> {t}" for m, p in MODULES.items()
             if m.startswith("ablate.report.") and not m.startswith("ablate.report.compute")
             for t in framework_imports(p) if layer_of(t) in ("study", "stats", "launch")]
    assert reach == []


def test_the_reports_computations_import_no_section() -> None:
    """report/compute/ is the half that computes; report/sections/ the half that renders what it computed."""
    upward = [f"{m} -> {t}" for m, p in MODULES.items() if m.startswith("ablate.report.compute")
              for t in framework_imports(p) if t.startswith("ablate.report.sections")]
    assert upward == []


_ISSUE_NUMBER = re.compile(r"\bissues? ?#?\d+|(?<![\w&])#\d{2}\b", re.IGNORECASE)
CITED = ("ablate", "registry", "tests", "docs", "scripts", "experiments")


def test_no_file_cites_an_issue_number() -> None:
    """A reader without the tracker learns nothing from an issue's number: the feature is named instead."""
    files = [p for folder in CITED for p in sorted(ROOT.joinpath(folder).rglob("*"))
             if p.suffix in (".py", ".md", ".yaml", ".yml") and p.is_file()]
    found = [f"{p.relative_to(ROOT)}:{n}" for p in files
             for n, line in enumerate(p.read_text().splitlines(), 1) if _ISSUE_NUMBER.search(line)]
    assert found == []


def test_an_issue_number_is_found() -> None:
    # the probes are split so that this file does not cite what it looks for
    probes = ("(iss" "ue 29)", "see #" "31", "Iss" "ue #7", "color #1f77b4", "#444444", "&#39;", "issues")
    assert [bool(_ISSUE_NUMBER.search(s)) for s in probes] == [True, True, True, False, False, False, False]
