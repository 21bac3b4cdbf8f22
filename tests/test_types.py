"""mypy over registry/ and ablate/ with the configuration in pyproject.toml ([tool.mypy]): strict in the
public component API and the spec package, the defaults elsewhere.

A cold run (no .mypy_cache) type-checks torch's and pydantic's stubs too: about a minute on 2 cores, hence
`slow`; it stays in the default suite.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_mypy_is_clean() -> None:
    result = subprocess.run([sys.executable, "-m", "mypy"], cwd=REPO, capture_output=True, text=True,
                            timeout=600)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "Success: no issues found" in result.stdout
