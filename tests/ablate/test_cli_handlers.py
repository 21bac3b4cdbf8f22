"""Every command hands its arguments to a function that exists (the CLI imports them lazily, so a module
that moved would otherwise fail only when a user runs that command)."""

from __future__ import annotations

import importlib
import re
from pathlib import Path

import pytest

from ablate.cli import HANDLERS, build_parser

SOURCE = (Path(__file__).resolve().parents[2] / "ablate" / "cli.py").read_text()
TARGETS = sorted(set(re.findall(r'_call\(\s*"(ablate[\w.]*)",\s*"(\w+)"', SOURCE)))


def test_the_handlers_are_found() -> None:
    assert len(TARGETS) >= 8
    commands = set(build_parser()._subparsers._group_actions[0].choices)  # type: ignore[union-attr]
    assert set(HANDLERS) <= commands


@pytest.mark.parametrize(("module", "function"), TARGETS, ids=[f"{m}.{f}" for m, f in TARGETS])
def test_every_command_target_exists(module: str, function: str) -> None:
    assert callable(getattr(importlib.import_module(module), function, None)), f"{module}.{function}"
