"""What a run says of this machine before it is done: its expected time after its first seconds of
training (ablate/engine/progress.py), and how to leave busy cores alone when other work holds them
(ablate/hardware.py ``free_cores`` and ``busy_cores_note``)."""

from __future__ import annotations

import os

import pytest
import torch

from ablate import hardware
from ablate.engine import progress
from ablate.spec.experiment import ExperimentSpec
from tests.factories import tiny_spec


def test_the_expected_time_is_said_once_from_this_process_steps(monkeypatch: pytest.MonkeyPatch,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    clock = iter([100.0, 102.0, 110.0, 120.0])  # start, 2 s (too early), 10 s, 20 s
    monkeypatch.setattr(progress.time, "monotonic", lambda: next(clock))
    monkeypatch.delenv("ABLATE_QUIET", raising=False)
    bar = progress.Progress(total=1000, start_step=200, every_s=1e9)  # a resumed run: 800 steps to go
    assert bar.expected(210) is None  # 2 s in: not yet
    said = bar.expected(300)  # 100 steps in 10 s: 800 steps in 80 s
    threads = torch.get_num_threads()
    assert said == (f"expected: about 80 s for its 800 steps on this machine ({threads} CPU "
                    f"thread{'s' * (threads != 1)}), evaluations aside")
    assert bar.expected(400) is None  # once


def test_busy_cores_are_said_with_how_to_leave_them_alone(monkeypatch: pytest.MonkeyPatch,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(os, "sched_getaffinity", lambda _: {0, 1, 2, 3})
    monkeypatch.setattr(os, "getloadavg", lambda: (1.2, 0.0, 0.0))
    assert hardware.free_cores() == (3, 4)
    monkeypatch.setattr(os, "getloadavg", lambda: (9.0, 0.0, 0.0))
    assert hardware.free_cores() == (1, 4)  # never below one
    spec = ExperimentSpec.model_validate(tiny_spec({"train.threads": 0}))
    monkeypatch.setattr(torch, "get_num_threads", lambda: 4)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert hardware.busy_cores_note(spec.train.device, quiet=False) == 1
    said = capsys.readouterr().err
    assert ("note: 3 of 4 cores are busy with other work and torch's 4 threads will fight for them: `--set "
            "train.threads=1` trains on the 1 free one") in said
    monkeypatch.setattr(os, "getloadavg", lambda: (0.1, 0.0, 0.0))
    assert hardware.busy_cores_note(spec.train.device, quiet=False) is None  # an idle machine: nothing to say
    assert capsys.readouterr().err == ""
