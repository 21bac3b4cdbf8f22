"""Ablation axes given as named levels (``ablation.axes``): an axis name -> its levels, each a name -> the
fields it sets, so that one level may set several fields (a GELU MLP is ``model.ffn: linear`` with
``model.activation: gelu``) and components that take different settings cross in a factorial:

    axes:
      ffn:
        gelu_mlp: {model.ffn: linear, model.activation: gelu}
        swiglu: {model.ffn: swiglu}
      model.norm: [builtin, rms]

Only their shape is checked here (ablate/spec/study_sections.py's ``AblationSpec`` calls it); that their
fields are spec fields and each level gives a valid spec is checked where the whole spec is known
(ablate/spec/load.py), and ablate/study/designs.py expands them into cells.
"""

from __future__ import annotations

import re
from typing import Any

from ablate.spec.base import Checks

__all__ = ["LEVEL_NAME", "axis_kinds", "check_levels", "level_fields"]


LEVEL_NAME = r"^[A-Za-z0-9][A-Za-z0-9_\-]{0,39}$"  # an axis or level name: a label part and a param key part


def level_fields(level: dict[str, Any]) -> dict[str, Any]:
    """A level's settings as dotted fields: ``{model: {ffn: linear}}`` and ``{model.ffn: linear}`` alike."""
    out: dict[str, Any] = {}
    for key, value in level.items():
        if isinstance(value, dict) and value:
            out.update({f"{key}.{k}": v for k, v in level_fields(value).items()})
        else:
            out[str(key)] = value
    return out


def check_levels(checks: Checks, name: str, levels: dict[str, dict[str, Any]]) -> None:
    """An axis of named levels: a word for its name (it labels the variants: ffn=gelu_mlp), a word for each
    level, and each level sets at least one field."""
    at = f"axes.{name}"
    if re.match(LEVEL_NAME, name) is None:
        checks.fail(at, f"an axis of named levels is named by a word (letters, digits, _ or -), e.g. ffn, "
                    f"not {name!r}: its levels name the fields they set")
    for level, fields in levels.items():
        if re.match(LEVEL_NAME, str(level)) is None:
            checks.fail(f"{at}.{level}", f"a level is named by a word (letters, digits, _ or -), found "
                        f"{level!r}")
        elif not fields:
            checks.fail(f"{at}.{level}", f"level {level!r} sets nothing: give the fields it sets, e.g. "
                        "{model.norm: rms}")


def axis_kinds(data: Any) -> None:
    """An axis is a list of a field's values or a mapping of named levels: one located line (SpecFieldError)
    where it is neither, not one per member of the field's union type."""
    axes = data.get("axes") if isinstance(data, dict) else None
    if not isinstance(axes, dict):
        return
    checks = Checks()
    for key, values in axes.items():
        if isinstance(values, dict):
            for level, fields in values.items():
                if not isinstance(fields, dict):
                    checks.fail(f"axes.{key}.{level}", f"found {fields!r}; a level is the fields it sets, a "
                                "mapping such as {model.ffn: swiglu}")
        elif not isinstance(values, list):
            checks.fail(f"axes.{key}", f"found {values!r}; expected a list (the field's values, e.g. "
                        "[pre_norm, post_norm]) or a mapping of named levels (each the fields it sets)")
    checks.raise_any()
