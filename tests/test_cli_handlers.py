"""Every command reaches its handler with the right arguments: each parsed argument is passed by keyword
to the parameter of the same name, from one place (``cli.dispatch``); the handlers exist (the CLI imports
them lazily, so a module that moved would otherwise fail only when a user runs that command); and a
reader that stops reading (`ablate list | head -1`) ends the command quietly with exit 0."""

from __future__ import annotations

import argparse
import inspect
import os
import subprocess
import sys
import warnings
from pathlib import Path
from typing import Any

import pytest

from ablate import cli
from ablate.cli import COMMANDS, build_parser, handler, handler_arguments, main

REPO = Path(__file__).resolve().parents[1]


def _subparsers() -> dict[str, argparse.ArgumentParser]:
    action = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    return dict(action.choices)


def sample_argv(name: str, sub: argparse.ArgumentParser) -> list[str]:
    """The shortest command line the subparser accepts: every required argument given as '1'."""
    argv = [name]
    for action in sub._actions:
        if not action.option_strings and action.nargs not in ("?", "*"):
            argv.append("1")
        elif action.option_strings and action.required:
            argv += [action.option_strings[0], "1"]
    return argv


def test_the_command_table_is_the_parser() -> None:
    assert [n for c in COMMANDS for n in (c.name, *c.aliases)] == list(_subparsers())
    assert len(COMMANDS) >= 16


@pytest.mark.parametrize("command", COMMANDS, ids=[c.name for c in COMMANDS])
def test_every_argument_names_a_parameter_of_its_handler(command: cli.Command) -> None:
    """A renamed parameter, or an argument its handler does not take, fails here, not in a user's hands."""
    fn = handler(command)
    args = build_parser().parse_args(sample_argv(command.name, _subparsers()[command.name]))
    kwargs = handler_arguments(args)
    inspect.signature(fn).bind(**kwargs)  # TypeError: a dest with no parameter, or a parameter never filled
    assert kwargs and set(kwargs) <= set(inspect.signature(fn).parameters)


def test_a_reordered_handler_still_gets_each_value_by_name(monkeypatch: pytest.MonkeyPatch) -> None:
    import ablate.study.export_study

    got: dict[str, Any] = {}

    def reordered(storage: str | None = None, folder: str = "") -> int:  # the parameters swapped
        got.update(folder=folder, storage=storage)
        return 0

    monkeypatch.setattr(ablate.study.export_study, "main_import", reordered)
    assert main(["import", "exported", "--storage", "journal.log"]) == 0
    assert got == {"folder": "exported", "storage": "journal.log"}


def test_a_handler_whose_parameter_was_renamed_fails_the_binding() -> None:
    def renamed(export_dir: str, storage: str | None = None) -> int:
        return 0

    kwargs = handler_arguments(build_parser().parse_args(["import", "exported"]))
    with pytest.raises(TypeError):
        inspect.signature(renamed).bind(**kwargs)


def test_a_broken_pipe_ends_quietly_with_exit_0() -> None:
    """The reader is gone before the first line is written: every write fails with EPIPE."""
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        done = subprocess.run([sys.executable, "-m", "ablate", "list"], cwd=REPO, stdout=write_end,
                              stderr=subprocess.PIPE, text=True, timeout=120)
    finally:
        os.close(write_end)
    assert (done.returncode, done.stderr) == (0, "")


def test_a_broken_pipe_inside_a_handler_is_exit_0(monkeypatch: pytest.MonkeyPatch) -> None:
    def reader_gone(**kwargs: Any) -> int:
        raise BrokenPipeError(32, "Broken pipe")

    monkeypatch.setattr(cli, "handler", lambda command: reader_gone)
    assert main(["runs"]) == 0


@pytest.mark.soak
@pytest.mark.slow  # a real study, training or subprocess (the fast tier stays under 3 minutes)
def test_the_terminal_shows_mlflow_lines_only_with_verbose(tmp_path: Path) -> None:
    """A new store makes MLflow log "Creating initial MLflow database tables" at INFO: hidden by default."""
    env = {k: v for k, v in os.environ.items() if k not in ("MLFLOW_TRACKING_URI", *cli.QUIET_ENV)}
    started = []
    for flags, shown in (([], False), (["--verbose"], True)):  # both at once: each creates a new store
        folder = tmp_path / ("verbose" if shown else "quiet")
        folder.mkdir()
        started.append((shown, subprocess.Popen([sys.executable, "-m", "ablate", "runs", *flags], cwd=folder,
                                                env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                                text=True)))
    for shown, proc in started:
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err
        assert out.startswith("no runs in sqlite:///")
        assert ("Creating initial MLflow database tables" in err) is shown, err


def test_quiet_turns_off_the_progress_bars_of_datasets(monkeypatch: pytest.MonkeyPatch) -> None:
    import datasets

    for key in cli.QUIET_ENV:  # recorded, so the test leaves the environment as it found it
        monkeypatch.setenv(key, "unset")
        monkeypatch.delenv(key)
    with warnings.catch_warnings():  # an earlier in-process `main` may have set the variable datasets read
        warnings.simplefilter("ignore", UserWarning)
        datasets.enable_progress_bars()
    try:
        cli.quiet_libraries()
        assert os.environ["HF_DATASETS_DISABLE_PROGRESS_BARS"] == "1"  # also for the workers it starts
        assert not datasets.is_progress_bar_enabled()
    finally:
        os.environ.pop("HF_DATASETS_DISABLE_PROGRESS_BARS", None)  # it has priority over the call below
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)
            datasets.enable_progress_bars()
