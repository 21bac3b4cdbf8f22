"""What an axis and a variant option are: the one declaration everything else reads.

An :class:`Axis` is a design choice the spec can ablate (``residual``, ``positions``, ``norm``, ...). It is
declared once, in its own file of this package (or in a plugin), with :func:`registry.declare_axis`:

* ``kind``: the registry kind and the spec field under ``model:`` (``model.positions``), and its default;
  a recipe axis lives in another ``section`` of the spec (``train.optimizer``), where its value is the
  section's ``name`` field (``train.optimizer.name``) and its options are fields beside it;
* ``contract``: how the model builder constructs and calls a component of this kind;
* ``hooks``: the places in the model where the builder calls it (``embedding``, ``attention.rotary``,
  ``attention.bias``, ``residual``, ...), for ``ablate list`` and docs/architecture.md;
* ``options``: options every variant of the axis takes (``norm_eps``), as :class:`Option`;
* ``parent``: for a sub-axis, the axis whose variants may take it (``activation`` is taken by the FFN
  variants that list it in their ``takes``).

A variant's own options are declared where it is registered (``@register("positions", "rope",
options=(Option("rope_base", float, 10000.0, "...", gt=0),))``) and belong to it: the spec accepts them
only when that variant is chosen. Spec fields, their validation, the JSON Schema, ``ablate list``, the
builder's keyword arguments and the registry-wide contract test all read these declarations.

Pure Python on purpose: the spec layer reads declarations without building any module.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

OptionType = type[bool] | type[int] | type[float] | type[str] | type[tuple[Any, ...]]
MODEL = "model"  # the section of the model axes; the recipe's axes name theirs (train.optimizer, ...)


@dataclass(frozen=True)
class Option:
    """A typed setting of one variant (or of every variant of an axis), a field of the axis's section
    (``model:``, or a recipe axis's own, e.g. ``train.optimizer:``).

    ``kwarg``: the constructor keyword the builder passes it as (default: ``name``). ``choices``: the
    accepted values of a ``str`` option. ``ge``/``gt``/``le``/``lt``: bounds of a number (of each number of
    a ``tuple`` option, which holds ``length`` numbers: Adam's betas). ``always``: the option was a plain
    field before options belonged to variants, so every spec records it (at its default where its variant
    is not chosen): runs recorded then keep their identity. ``off``: a value that switches the option off
    (``qk_norm_length`` 0 leaves g0 to ``qk_norm_scale``); a report's account of how a variant ran leaves
    the option out at that value. ``added_later``: the option came after runs were recorded with its
    variant, so a run's identity leaves it out at its default. ``required``: the variant has no sensible
    default (muP's base width): a spec that chooses the variant must give it; ``example`` is a value the
    contract tests and the error's suggestion use. ``hint``: said after a value out of bounds (where the
    paper's value lies).
    """

    name: str
    type: OptionType
    default: Any
    doc: str
    kwarg: str | None = None
    choices: tuple[str, ...] = ()
    ge: float | None = None
    gt: float | None = None
    le: float | None = None
    lt: float | None = None
    always: bool = False
    off: Any = None
    length: int = 2  # a tuple option's number of values
    added_later: bool = False
    required: bool = False
    example: Any = None
    hint: str = ""

    @property
    def keyword(self) -> str:
        return self.kwarg or self.name

    def normalised(self, value: Any) -> Any:
        """A checked value as the builder takes it: a tuple option's YAML list as a tuple."""
        return tuple(value) if self.type is tuple and isinstance(value, list) else value

    def problem(self, value: Any) -> str | None:
        """None when ``value`` is acceptable, else what is wrong with it (types are strict, as in specs)."""
        if self.type is tuple:
            return self._tuple_problem(value)
        expected = {bool: "true or false", int: "an integer", float: "a number", str: "a string"}[self.type]
        if self.type is bool:
            ok = isinstance(value, bool)
        elif self.type is int:
            ok = isinstance(value, int) and not isinstance(value, bool)
        elif self.type is float:
            ok = isinstance(value, int | float) and not isinstance(value, bool) and value == value
            ok = ok and abs(value) != float("inf")
        else:
            ok = isinstance(value, str)
        if not ok:
            return f"found {_show(value)}; expected {expected}"
        if self.choices and value not in self.choices:
            return f"found {_show(value)}; accepted: {', '.join(self.choices)}"
        return self._bound_problem(value)

    def _bound_problem(self, value: Any, shown: Any = None) -> str | None:
        for bound, holds, word in (
            (self.ge, lambda b: value >= b, ">="), (self.gt, lambda b: value > b, ">"),
            (self.le, lambda b: value <= b, "<="), (self.lt, lambda b: value < b, "<"),
        ):
            if bound is not None and not holds(bound):
                hint = f" ({self.hint})" if self.hint else ""
                return f"found {_show(value if shown is None else shown)}; must be {word} {bound:g}{hint}"
        return None

    def _tuple_problem(self, value: Any) -> str | None:
        """A list (or tuple) of ``length`` numbers, each within the bounds."""
        expected = f"a list of {self.length} numbers"
        if not isinstance(value, list | tuple) or len(value) != self.length:
            return f"found {_show(value)}; expected {expected}"
        for item in value:
            if isinstance(item, bool) or not isinstance(item, int | float) or item != item \
                    or abs(item) == float("inf"):
                return f"found {_show(value)}; expected {expected}"
            problem = self._bound_problem(item, shown=list(value))
            if problem is not None:
                return problem.replace("; must be", "; each must be", 1)
        return None

    def json_schema(self) -> dict[str, Any]:
        """The option's JSON Schema (default, type, bounds, choices, description)."""
        types = {bool: "boolean", int: "integer", float: "number", str: "string", tuple: "array"}
        default = list(self.default) if isinstance(self.default, tuple) else self.default
        schema: dict[str, Any] = {"type": types[self.type], "default": default, "description": self.doc}
        if self.choices:
            schema["enum"] = list(self.choices)
        bounds: dict[str, Any] = {}
        for key, bound in (("minimum", self.ge), ("exclusiveMinimum", self.gt),
                           ("maximum", self.le), ("exclusiveMaximum", self.lt)):
            if bound is not None:
                bounds[key] = bound
        if self.type is tuple:
            schema.update(items={"type": "number", **bounds}, minItems=self.length, maxItems=self.length)
        else:
            schema.update(bounds)
        if self.required:
            schema["description"] += " (required by the variants that take it)"
        return schema


@dataclass(frozen=True)
class Axis:
    """One ablatable design choice: a registry kind that is also a spec field (``model.<kind>``, or a recipe
    axis's ``<section>.name``, e.g. ``train.optimizer.name``).

    ``canonical``: turns a spec value into the registry name it selects (the mask axis accepts any negative
    number and spells it ``-1e9`` style); it raises ValueError for a value it refuses. ``open_values``: a
    canonical value need not be registered (any negative mask fill works). ``added_later``: the axis came
    after the first record format, so a run's identity leaves it out at its default (runs recorded before
    it existed keep their identity). ``section``: the spec section holding the axis: ``model`` (its value
    is ``model.<kind>``) or a recipe section such as ``train.optimizer`` (its value is
    ``train.optimizer.name``, its options the section's other fields).
    """

    kind: str
    default: str
    doc: str
    contract: str
    hooks: tuple[str, ...]
    options: tuple[Option, ...] = ()
    parent: str | None = None
    canonical: Callable[[Any], str] | None = None
    open_values: bool = False
    added_later: bool = False
    value_examples: tuple[str, ...] = field(default=())
    section: str = MODEL

    @property
    def spec_field(self) -> str:
        """The dotted spec field naming the variant: ``model.positions``, ``train.optimizer.name``."""
        return f"{MODEL}.{self.kind}" if self.section == MODEL else f"{self.section}.name"


def _show(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list | tuple):
        return "[" + ", ".join(_show(v) for v in value) + "]"
    return repr(value)
