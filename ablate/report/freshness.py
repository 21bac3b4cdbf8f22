"""Whether a report folder already holds the report of a study as it stands: `ablate report STUDY --format
latex` then writes its table from the report.json there instead of building the whole report again.

A report is current when the folder's ``.report-inputs`` holds the digest of what the last whole build read
and was made by: every run of the study as loaded from MLflow (ids, statuses, parameters, metrics, tags,
the arms and searches, the runs left out and why) and the source of the ablate package that made it. A run
that finishes, a metric logged, a tag set (a withdrawn variant), or a new ablate, and the digest differs.
The digest is written only after a build whose every section was made and which was logged to MLflow, and
removed as a build starts, so a folder a build left half-written is never taken for current.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from functools import cache
from pathlib import Path

import ablate
from ablate.report.compute.loaded_study import Study

DIGEST_FILE = ".report-inputs"
# What `build_report` writes besides figures/: a folder missing one of them is rebuilt.
REPORT_FILES = ("report.md", "report.html", "report.json", "runs.csv")


@cache
def code_digest() -> str:
    """The sha256 of the ablate package's source files (path and bytes, in path order)."""
    root = Path(ablate.__file__).resolve().parent
    digest = hashlib.sha256()
    for path in sorted(root.rglob("*.py")):
        digest.update(path.relative_to(root).as_posix().encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()


def inputs_digest(study: Study) -> str:
    """The sha256 of the study as loaded (every field of every run, arm, search and note) and of the code."""
    loaded = json.dumps(dataclasses.asdict(study), sort_keys=True, default=repr)
    return hashlib.sha256(f"{code_digest()}\n{loaded}".encode()).hexdigest()


def is_current(out_dir: Path, digest: str) -> bool:
    """True when ``out_dir`` holds a whole report built from inputs with this digest."""
    marker = out_dir / DIGEST_FILE
    return (marker.is_file() and marker.read_text().strip() == digest
            and all((out_dir / name).is_file() for name in REPORT_FILES))


def forget(out_dir: Path) -> None:
    """Before a build writes anything: the folder no longer holds a report of known inputs."""
    (out_dir / DIGEST_FILE).unlink(missing_ok=True)


def mark_current(out_dir: Path, digest: str) -> None:
    """After a whole build: the folder's report is the one of these inputs (written atomically)."""
    partial = out_dir / f"{DIGEST_FILE}.partial"
    partial.write_text(digest + "\n")
    partial.replace(out_dir / DIGEST_FILE)
