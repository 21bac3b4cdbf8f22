"""What the runs of a study ran on: hardware, library versions, the code's commit, and the datasets.

Read from the tags every run carries (``ablate.device``, ``ablate.cpu``, ``ablate.host``,
``ablate.version.*``, ``mlflow.source.git.commit``), the first run's ``environment.json`` for what no tag
says, and each run's MLflow dataset inputs (name and digest), which are listed per seed or variant when
the runs did not all see the same data.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ablate.report.data import Run, Study

# Tags every run carries -> the label shown; hardware first, then the software, then the code.
ENV_TAGS = {"ablate.device": "device", "ablate.precision": "precision", "ablate.cpu": "CPU",
            "ablate.host": "host"}
CODE_TAGS = {"mlflow.source.git.commit": "git commit", "ablate.git_dirty": "uncommitted changes"}
# environment.json keys (the first run's) shown when no tag says the same.
ENV_JSON = {"cpu": "CPU", "cpu_count": "CPU cores (logical)", "gpu": "GPU", "platform": "platform"}
ORDER = ["device", "precision", "CPU", "CPU cores (logical)", "GPU", "host", "platform"]


def environment(study: Study) -> dict[str, list[str]]:
    """Distinct values across the runs of every environment tag, plus what the first run's
    environment.json adds (CPU model, core count, platform). Absent entries are simply not shown."""
    from ablate.tracking.read import read_text_artifact

    env: dict[str, set[str]] = {}
    for r in study.runs:
        for tag, value in r.tags.items():
            version = tag.startswith("ablate.version.")
            label = ENV_TAGS.get(tag) or CODE_TAGS.get(tag) or (
                tag.removeprefix("ablate.version.") + " version" if version else None)
            if label and value:
                env.setdefault(label, set()).add(value)
    if study.runs:
        text = read_text_artifact(study.runs[0].run_id, "environment.json")
        try:
            found = json.loads(text) if text else {}
        except ValueError:
            found = {}
        for key, shown in ENV_JSON.items():
            recorded = found.get(key) if isinstance(found, dict) else None
            if recorded not in (None, "") and shown not in env:
                env[shown] = {str(recorded)}
    return {k: sorted(v) for k, v in env.items()}


def hardware_rows(env: dict[str, list[str]]) -> list[list[str]]:
    """Hardware rows first (device, CPU, cores, host), then versions, then the code's commit."""
    code = list(CODE_TAGS.values())

    def rank(k: str) -> tuple[int, int, str]:
        return (0, ORDER.index(k), k) if k in ORDER else (2, code.index(k), k) if k in code else (1, 0, k)

    rows = [[k, "; ".join(env[k])] for k in sorted(env, key=rank)]
    return rows or [["(none recorded)", "—"]]




# ---------------------------------------------------------------- datasets
Inputs = tuple[tuple[str, str], ...]  # sorted (dataset name, digest) pairs of one run


def _cells(runs: Sequence[Run], everyone: Sequence[Run]) -> str:
    """The runs of one digest group in few words: 'every run', 'seeds 0, 1' (every variant of those
    seeds), else 'variant (seeds ...)' per variant."""
    if len(runs) == len(everyone):
        return "every run"
    seeds = sorted({r.seed for r in runs})
    if {r.run_id for r in runs} == {r.run_id for r in everyone if r.seed in seeds}:
        return ("seed " if len(seeds) == 1 else "seeds ") + ", ".join(map(str, seeds))
    by_variant: dict[str, list[int]] = {}
    for r in runs:
        by_variant.setdefault(r.variant, []).append(r.seed)
    return "; ".join(f"{v} (seed{'s' * (len(s) > 1)} {', '.join(map(str, sorted(s)))})"
                     for v, s in by_variant.items())


def dataset_rows(runs: Sequence[Run], inputs_of: Callable[[str], Inputs]) -> list[list[str]]:
    """``[["dataset", text], ...]``: one row per dataset name when every run saw the same digest, else one
    row per distinct digest naming the seeds or variants that saw it (``inputs_of(run_id)`` gives a
    run's sorted (name, digest) pairs). Runs that logged no dataset (older records) are left out."""
    seen = {r.run_id: inputs_of(r.run_id) for r in runs}
    logged = [r for r in runs if seen[r.run_id]]
    names = sorted({name for pairs in seen.values() for name, _ in pairs})
    rows = []
    for name in names:
        groups: dict[str, list[Run]] = {}
        for r in logged:
            for digest in sorted({d for n, d in seen[r.run_id] if n == name}):
                groups.setdefault(digest, []).append(r)
        if len(groups) == 1:
            rows.append(["dataset", f"{name} (digest `{next(iter(groups))}`)"])
            continue
        for digest, members in sorted(groups.items(), key=lambda g: (min(r.seed for r in g[1]), g[0])):
            rows.append(["dataset", f"{name} (digest `{digest}`): {_cells(members, logged)}"])
    return rows


def study_dataset_rows(study: Study) -> list[list[str]]:
    """``dataset_rows`` of every run of the study, read from MLflow."""
    from ablate.tracking.read import dataset_inputs

    def inputs_of(run_id: str) -> Inputs:
        return tuple(sorted({(name, digest) for name, digest, _ in dataset_inputs(run_id)}))

    return dataset_rows(study.runs, inputs_of)
