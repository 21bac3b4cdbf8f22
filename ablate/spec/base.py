"""What every section model of the spec is built from: the base model, strict types, cross-field errors.

Strict types: YAML hands over real integers, floats and booleans, so a field takes only its own type.
Pydantic's lax mode would turn `heads: true` into 1, `position_dropout: "yes"` into True and `seed: "7"`
into 7; here each is an error. A float field still takes an integer (`lr: 1` is 1.0) and a tuple field a
YAML list (`betas: [0.9, 0.98]`), so JSON dumps and tuner-written files validate back unchanged.

Cross-field checks (model validators) report *every* failing check at once through :class:`Checks`, each
blaming one field and naming the fields it read, so the spec loader can point at the right line and skip
a check whose inputs were themselves invalid (ablate/spec/load.py).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Annotated, Any, ClassVar, NamedTuple

import pydantic
from pydantic import BaseModel, ConfigDict, SerializerFunctionWrapHandler, model_serializer

NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.\-]{0,99}$"  # a folder and an MLflow experiment name

# Upper bound for counts that have no natural limit: keeps 10**30 from reaching torch.
BIG = 10**12

Int = Annotated[int, pydantic.Strict()]  # an integer, not a bool, float or numeric string
Float = Annotated[float, pydantic.Strict()]  # a number (an integer is accepted), not a bool or string
Bool = Annotated[bool, pydantic.Strict()]  # true or false, not 1 or "yes"


class Strict(BaseModel):
    """Unknown keys are errors; inf/nan are never a sensible setting (1e400 in YAML overflows to inf).

    A field's docstring (the string literal under it) is its description in the JSON Schema, which editors
    show, and in the field guide (docs/spec.md, ablate/spec/guide.py). Descriptions are schema only: they
    never reach a dumped spec, so no run's identity depends on them.
    """

    model_config = ConfigDict(extra="forbid", validate_assignment=False, allow_inf_nan=False,
                              use_attribute_docstrings=True)



class LaterFields(Strict):
    """A section with fields that came after runs were recorded (``later_fields``): each is left out of the
    dumped spec (MLflow params, spec.yaml, the run's identity) while unset, so that every spec without it
    keeps its record and its hash."""

    later_fields: ClassVar[tuple[str, ...]] = ()

    @model_serializer(mode="wrap")
    def _dump(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        data: dict[str, Any] = handler(self)
        for key in self.later_fields:
            if data.get(key) is None:
                data.pop(key, None)
        return data

class Issue(NamedTuple):
    """One failed cross-field check: dotted paths relative to the model that ran it."""

    field: str  # the field blamed (its line is the one reported)
    message: str
    involves: tuple[str, ...]  # every field the check read, the blamed one included


class SpecFieldError(ValueError):
    """Cross-field checks that failed, each blaming one field (``issues``).

    Pydantic reports a model validator's error at the model's path; the spec loader reads ``issues`` (from
    the error's ctx) to report one line per issue at the blamed field's line.
    """

    def __init__(self, issues: Iterable[Issue]) -> None:
        self.issues = list(issues)
        super().__init__("; ".join(issue.message for issue in self.issues))

    @classmethod
    def single(cls, field: str, message: str, *involves: str) -> SpecFieldError:
        return cls([Issue(field, message, (field, *involves))])

    @property
    def field(self) -> str:
        return self.issues[0].field


class Checks:
    """Collects the failing checks of one model validator so that all are reported, not the first only.

        checks = Checks()
        if self.d_model % self.heads:
            checks.fail("heads", "...", "d_model")
        checks.raise_any()
    """

    def __init__(self) -> None:
        self.issues: list[Issue] = []

    def fail(self, field: str, message: str, *involves: str) -> None:
        self.issues.append(Issue(field, message, (field, *involves)))

    def raise_any(self) -> None:
        if self.issues:
            raise SpecFieldError(self.issues)
