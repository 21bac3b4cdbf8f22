"""Variants' implementation versions in the MLflow record: the tag written when a run opens, and whether a
recorded run is stale (``ablate.tracking.supersede`` tags the stale cells of a study).

A variant's implementation version (``registry`` ``@register(..., version=N)``) enters the identity of the
runs that choose it, so a fixed variant's cells get new identities and ``ablate study`` trains them anew.
Its old runs stay in the store, as the record of what ran; this module tags them ``ablate.superseded`` with
what changed, so that the MLflow UI shows them stale and reports (``ablate.report.compute.loaded_study``)
leave them out.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import TYPE_CHECKING

import registry
from ablate.spec.model import component_versions, stale_components
from ablate.spec.train import recipe_choices
from ablate.tracking import record

if TYPE_CHECKING:
    from ablate.spec.experiment import ExperimentSpec

MODEL_PREFIX = "model."


def versions_tag(spec: ExperimentSpec) -> dict[str, str]:
    """A run's ``ablate.component_versions`` tag: its variants' implementation versions above 1 (none: {})."""
    chosen = {**spec.model.model_dump(mode="json"), **recipe_choices(spec.train.model_dump(mode="json"))}
    versions = component_versions(chosen)
    return {record.COMPONENT_VERSIONS: json.dumps(versions, sort_keys=True)} if versions else {}


def recorded_versions(tags: Mapping[str, str]) -> dict[str, int]:
    """A run's ``ablate.component_versions`` tag as {axis: version}; without it, every variant ran at 1."""
    text = tags.get(record.COMPONENT_VERSIONS, "")
    try:
        data = json.loads(text) if text else {}
    except ValueError:
        return {}
    return {str(k): int(v) for k, v in data.items()} if isinstance(data, dict) else {}


def stale_reason(params: Mapping[str, str], tags: Mapping[str, str]) -> str | None:
    """Why a run's result no longer measures its variants (``'attention=qk_norm v1, now v2'``), or None."""
    model = {k[len(MODEL_PREFIX):]: v for k, v in params.items() if k.startswith(MODEL_PREFIX)}
    recipe = {a.kind: params[a.spec_field] for a in registry.axes()
              if a.section != registry.MODEL and a.spec_field in params}  # train.optimizer.name -> optimizer
    stale = stale_components({**model, **recipe}, recorded_versions(tags))
    return "; ".join(stale) if stale else None
