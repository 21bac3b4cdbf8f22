"""The statistics floor is the one place where a verdict is decided: no module outside ``ablate/stats/``
compares an interval's bound with a margin (or with zero), builds a look or a verdict, or assigns a
verdict state; every other module reads what ``ablate.stats`` decided and renders or acts on it."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
OUTSIDE = sorted(p for p in ROOT.joinpath("ablate").rglob("*.py") if "stats" not in p.relative_to(ROOT).parts)

BOUNDS = {"lo", "hi"}  # an interval's bounds, as every look, effect and evidence names them
MARGINS = {"margin", "min_effect", "width"}
VERDICTS = {"Look", "Verdict", "Progress"}  # what ablate.stats.verdict / sequential decide and return
STATES = {"State", "Reading", "Answer", "Fixed", "HeldOut", "Outcome", "Direction", "ScaleOutcome",
          "Transfer", "Tuning"}


def _operand(node: ast.expr, names: set[str]) -> bool:
    if isinstance(node, ast.UnaryOp):
        node = node.operand
    return (isinstance(node, ast.Name) and node.id in names) or (
        isinstance(node, ast.Attribute) and node.attr in names)


def _zero(node: ast.expr) -> bool:
    return isinstance(node, ast.Constant) and not isinstance(node.value, bool) and node.value == 0


def interval_against_margin(tree: ast.AST) -> list[int]:
    """Lines comparing an interval bound with a margin, min_effect, width or zero."""
    hits = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare):
            operands = [node.left, *node.comparators]
            if any(_operand(o, BOUNDS) for o in operands) and any(
                    _operand(o, MARGINS) or _zero(o) for o in operands):
                hits.append(node.lineno)
    return hits


def from_stats(tree: ast.AST) -> set[str]:
    """The names a module imports from ablate.stats (a Progress of its own is another thing)."""
    return {alias.asname or alias.name for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)
            and (node.module or "").startswith("ablate.stats") for alias in node.names}


def verdicts_made(tree: ast.AST) -> list[int]:
    """Lines building a Look, Verdict or Progress, or assigning or returning a verdict state."""
    imported = from_stats(tree)
    made, states = VERDICTS & imported, STATES & imported

    def _state_member(node: ast.expr | None) -> bool:
        return (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
                and node.value.id in states)

    hits = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in made:
            hits.append(node.lineno)
        elif isinstance(node, ast.Assign | ast.AnnAssign | ast.Return) and _state_member(node.value):
            hits.append(node.lineno)
        elif isinstance(node, ast.IfExp) and (_state_member(node.body) or _state_member(node.orelse)):
            hits.append(node.lineno)
    return hits


def test_no_module_outside_stats_compares_an_interval_with_a_margin() -> None:
    found = [f"{p.relative_to(ROOT)}:{n}" for p in OUTSIDE
             for n in interval_against_margin(ast.parse(p.read_text()))]
    assert found == []


def test_no_module_outside_stats_makes_a_verdict() -> None:
    found = [f"{p.relative_to(ROOT)}:{n}" for p in OUTSIDE for n in verdicts_made(ast.parse(p.read_text()))]
    assert found == []


def test_the_checks_find_what_they_look_for() -> None:
    probe = ast.parse("from ablate.stats.verdict import Direction, Reading, State, Verdict\n"
                      "a = look.lo > margin\nb = -m <= e.hi\nc = ev.hi < 0\nd = x.lower() == 'true'\n"
                      "v = Verdict(Reading.OPEN, None)\nr = Reading.OPEN\ndef f():\n    return State.EFFECT\n"
                      "w = Direction.NONE if x else Direction.BETTER\nok = reading == Reading.OPEN\n")
    assert interval_against_margin(probe) == [2, 4]
    assert sorted(set(verdicts_made(probe))) == [6, 7, 9, 10]
    assert verdicts_made(ast.parse("from ablate.engine.progress import Progress\np = Progress(3)\n")) == []
