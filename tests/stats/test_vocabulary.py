"""One vocabulary of verdict words (ablate/stats/vocabulary.py): a word has one spelling and one name in every
enum that holds it, and the report and the CLI print states from the enums, never from bare strings."""

from __future__ import annotations

import ast
from pathlib import Path

from ablate.stats import claims, sequential, transfer, verdict
from ablate.stats.vocabulary import VERDICT_WORDS, Answer, Outcome, Question, Reading, State, Transfer

ROOT = Path(__file__).resolve().parents[2]
# Where verdicts are printed: every report module and the CLI (`ablate status` and the dry run print the
# Progress and PowerPlan the statistics floor words).
PRINTERS = sorted([*ROOT.joinpath("ablate", "report").rglob("*.py"), ROOT / "ablate" / "cli.py"])
# A claim's question is the spec's own Literal (``ablation.expect: {effect: better}``): mypy checks those
# strings against it, so they are not bare states.
QUESTIONS = set(Question.__args__[0].__args__)  # type: ignore[attr-defined]


def _spoken(value: str) -> str:
    return value.replace("_", " ")  # State's words are identifiers as the store records them: no_effect


def test_a_word_has_one_name_and_one_spelling_in_every_enum() -> None:
    by_name: dict[str, set[str]] = {}
    by_word: dict[str, set[str]] = {}
    for enum in VERDICT_WORDS:
        for member in enum:
            by_name.setdefault(member.name, set()).add(_spoken(member.value))
            by_word.setdefault(_spoken(member.value), set()).add(member.name)
    assert {name: words for name, words in by_name.items() if len(words) > 1} == {}
    assert {word: names for word, names in by_word.items() if len(names) > 1} == {}


def test_the_floor_takes_its_words_from_the_vocabulary() -> None:
    assert verdict.Reading is Reading and verdict.Answer is Answer and verdict.State is State
    assert sequential.State is State and claims.Outcome is Outcome and transfer.Transfer is Transfer
    assert not hasattr(verdict, "RoundState")  # a look's state and its rounds' are one State


def _bare_words(tree: ast.AST, words: set[str]) -> list[tuple[int, str]]:
    """String constants that are a verdict word, outside docstrings, f-strings' text and dict keys."""
    prose: set[int] = set()
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if isinstance(body, list) and body and isinstance(body[0], ast.Expr) \
                and isinstance(body[0].value, ast.Constant):
            prose.add(id(body[0].value))
        if isinstance(node, ast.JoinedStr):
            prose.update(id(v) for v in node.values)
        if isinstance(node, ast.Dict):
            prose.update(id(k) for k in node.keys if k is not None)
    return [(node.lineno, node.value) for node in ast.walk(tree)
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in words
            and id(node) not in prose]


def test_the_report_and_the_cli_spell_no_state_as_a_bare_string() -> None:
    words = {member.value for enum in VERDICT_WORDS for member in enum} - QUESTIONS
    found = [f"{p.relative_to(ROOT)}:{line}: {word!r}" for p in PRINTERS
             for line, word in _bare_words(ast.parse(p.read_text()), words)]
    assert found == []


def test_a_bare_word_is_found_and_prose_is_not() -> None:
    source = ('"""open: a docstring"""\n'
              'def f(x):\n    """no effect"""\n    y = {"open": f"open {x}"}\n'
              '    return "no_effect" if x == "open" else "better"\n')
    found = _bare_words(ast.parse(source), {"open", "no effect", "no_effect"})
    assert found == [(5, "no_effect"), (5, "open")]
