"""The style rules that a tool checks: ruff over every Python file of the project (pyproject's settings).

mypy is not run here (a cold run costs a minute of the suite's budget); run `mypy ablate registry`.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_ruff_finds_nothing() -> None:
    done = subprocess.run([sys.executable, "-m", "ruff", "check", "--no-cache", "ablate", "registry", "tests",
                           "scripts"], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
