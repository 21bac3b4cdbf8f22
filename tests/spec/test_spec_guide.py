"""The field guide: every property of the JSON Schema is described, descriptions leave every run's identity
alone, docs/spec.md is generated from the models, and its worked examples validate."""

from __future__ import annotations

import csv
import gzip
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

import registry
from ablate.spec import guide, guide_examples
from ablate.spec.axis_fields import value_field
from ablate.spec.load import json_schema, load_spec
from ablate.study.designs import plan_study

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


# ---------------------------------------------------------------- docs/spec.md
def test_committed_field_guide_is_generated_from_the_models(monkeypatch: pytest.MonkeyPatch) -> None:
    _builtin_components_only(monkeypatch)
    committed = (REPO / "docs" / "spec.md").read_text()
    assert committed == guide.markdown(), "regenerate: python -m ablate.spec.guide > docs/spec.md"


def test_field_guide_names_every_field_and_every_registered_variant(monkeypatch: pytest.MonkeyPatch) -> None:
    _builtin_components_only(monkeypatch)
    text = guide.markdown()
    schema = json_schema()
    for name, _ in _properties(schema):
        assert f"| `{name.rsplit('.', 1)[-1]}` |" in text, name
    for axis in registry.axes():  # a recipe axis's row is its section's `name`
        rows = [line for line in text.splitlines() if line.startswith(f"| `{value_field(axis)}` |")]
        assert any(all(variant in row for variant in registry.names(axis.kind)) for row in rows), axis.kind


def test_field_guide_renders_a_section_once_and_says_where_else_it_is_used() -> None:
    text = guide.markdown()
    assert text.count("### `data.files.train`") == 1
    assert "The same fields at `data.files.val`, `data.files.test`." in text
    assert "### `ablation.tune.pruner`" in text and "The same fields at `search.pruner`." in text


EXAMPLES = [*guide_examples.DATA_EXAMPLES, *guide_examples.DESIGN_EXAMPLES]


def _data_files(spec_text: str, folder: Path) -> None:
    """Create the files a worked example names, small but well formed, so that it validates wherever the
    spec loader also reads its data (each example's root is `${ABLATE_DATA_DIR:-data}` or none)."""
    data = yaml.safe_load(spec_text)["data"]
    section = data.get(data["source"])
    if data["source"] not in ("files", "text") or not section:
        return
    root = folder / "data" if section.get("root") else folder
    for split in ("train", "val", "test"):
        named = section.get(split)
        for name in (named.values() if isinstance(named, dict) else [named] if named else []):
            _write_sample(root / name)


def _write_sample(path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.suffix == ".tsv":
        text = "ein Hund .\ta dog .\n"
    elif path.suffix == ".jsonl":
        text = json.dumps({"translation": {"de": "ein Hund .", "en": "a dog ."}}) + "\n"
    else:
        text = "a dog runs .\n"
    if path.suffix == ".gz":
        path.write_bytes(gzip.compress(text.encode()))
    else:
        path.write_text(text)


@pytest.mark.parametrize("example", EXAMPLES, ids=[e.spec.split("\n", 1)[0] for e in EXAMPLES])
def test_each_worked_example_validates(example: guide_examples.Example, tmp_path: Path,
                                       monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("ABLATE_DATA_DIR", raising=False)
    if "data:" in example.spec:
        _data_files(example.spec, tmp_path)
    path = tmp_path / "spec.yaml"
    path.write_text(example.spec)
    spec = load_spec(path)
    assert spec.name == yaml.safe_load(example.spec)["name"]
    if spec.ablation is not None:  # every variant a valid spec, as `ablate study --dry-run` checks
        plan = plan_study(str(path))
        assert len(plan.variants) >= 2


def test_worked_examples_cover_every_data_source_file_format_and_design() -> None:
    data = [yaml.safe_load(e.spec)["data"] for e in guide_examples.DATA_EXAMPLES]
    assert {d["source"] for d in data} == {"synthetic", "files", "hub", "text"}
    assert {d["files"]["format"] for d in data if d["source"] == "files"} == {"text", "tsv", "jsonl"}
    studies = [yaml.safe_load(e.spec) for e in guide_examples.DESIGN_EXAMPLES]
    designs = {s["ablation"].get("design", "one_at_a_time") for s in studies if "ablation" in s}
    assert designs == {"one_at_a_time", "full_factorial", "variants"}
    assert any("search" in s for s in studies)
    text = guide.markdown()
    assert all(e.spec in text for e in EXAMPLES)
