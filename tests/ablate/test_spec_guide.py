"""The field guide: every property of the JSON Schema is described, descriptions leave every run's identity
alone, docs/spec.md is generated from the models, and its worked examples validate."""

from __future__ import annotations

import csv
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import registry
from ablate.spec.load import json_schema, load_spec

REPO = Path(__file__).resolve().parents[2]


def _builtin_components_only(monkeypatch: pytest.MonkeyPatch) -> None:
    """Hide every component registered outside the `registry` package (plugins, test components): the
    committed files list this repository's components."""
    registry.load_plugins()
    builtin = {kind: {name: entry for name, entry in bucket.items()
                      if getattr(entry.obj, "__module__", "").split(".")[0] == "registry"}
               for kind, bucket in registry.REGISTRY._entries.items()}
    monkeypatch.setattr(registry.REGISTRY, "_entries", builtin)


def _properties(schema: dict[str, Any]) -> Iterator[tuple[str, dict[str, Any]]]:
    """(section.field, property schema) of the top level and of every section model."""
    for name, prop in schema["properties"].items():
        yield name, prop
    for section, model in schema["$defs"].items():
        for name, prop in model.get("properties", {}).items():
            yield f"{section}.{name}", prop


def test_every_property_of_the_schema_has_a_description() -> None:
    schema = json_schema()
    undescribed = [name for name, prop in _properties(schema) if not str(prop.get("description", "")).strip()]
    assert len(list(_properties(schema))) > 150  # the walk reaches every section model
    assert undescribed == []


def test_descriptions_are_one_line_for_editors() -> None:
    """Field docstrings wrap in the source; the schema's descriptions do not."""
    described = [prop["description"] for _, prop in _properties(json_schema())]
    assert not [d for d in described if "\n" in d or "  " in d]


def test_a_description_is_schema_only_never_part_of_a_dumped_spec() -> None:
    spec = load_spec(REPO / "experiments" / "quickstart.yaml")
    dumped = str(spec.resolved())
    described = json_schema()["$defs"]["DataSpec"]["properties"]["cache_dir"]["description"]
    assert described and described not in dumped


def _recorded_cells(study: str) -> list[tuple[list[str], str]]:
    """(the --set overrides that give each cell of a committed report, its recorded spec hash)."""
    cells = []
    with (REPO / "reports" / study / "runs.csv").open() as f:
        for row in csv.DictReader(f):
            overrides = [f"seed={row['seed']}"]
            if row["variant"] != "baseline":  # 'residual=post_norm, train.schedule.warmup_steps=0'
                for part in row["variant"].split(", "):
                    key, value = part.split("=", 1)
                    overrides.append(f"{key if '.' in key else 'model.' + key}={value}")
            cells.append((overrides, row["spec_hash"]))
    return cells


@pytest.mark.parametrize("study", ["quick-axes", "positions-extrapolation", "warmup-vs-norm-multi30k"])
def test_committed_studies_keep_their_cells_hashes(study: str) -> None:
    """A translation study on synthetic data, one on files, a language-model one: each cell's spec, rebuilt
    from the study's spec, has the hash its report recorded when it ran."""
    cells = _recorded_cells(study)
    assert len(cells) >= 12
    spec_path = REPO / "experiments" / "ablations" / f"{study}.yaml"
    rebuilt = [load_spec(spec_path, overrides).spec_hash for overrides, _ in cells]
    assert rebuilt == [recorded for _, recorded in cells]
