"""The spec fields of registry axes, for any section that holds them: ``model:`` (one field per axis) and
the training recipe's sections (``train.optimizer``, ``train.schedule``, ``train.loss``: the axis's value is
the section's ``name``). Both read the registry's declarations the one way:

* an axis value must be a registered variant (or an open value, the mask's negative numbers), with a
  did-you-mean;
* a variant's own options are accepted only when that variant is chosen, type-checked (strict, as every
  spec field) and filled with their defaults; a ``required`` option must be given (muP's base width);
* a chosen variant's ``check`` of the section.

A run's identity leaves out options that do not apply (None) and options declared ``added_later`` at their
default (:func:`identity_options`), so specs written before an option existed keep their hash.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import Field

import registry
from ablate.spec.base import Checks
from registry import Axis, Option
from registry.aliases import did_you_mean

__all__ = ["axis_fields", "check_axis", "component_default", "identity_options", "ignored_fields",
           "new_components_default", "option_names", "option_owner", "options_of", "section_axis",
           "section_option_values", "settled_overrides", "value_field"]


def options_of(axis: Axis) -> list[Option]:
    """The axis-wide options, then every variant's own ones (each once, in registration order)."""
    seen: dict[str, Option] = {o.name: o for o in axis.options}
    for entry in registry.REGISTRY.entries(axis.kind):
        for option in entry.options:
            seen.setdefault(option.name, option)
    return list(seen.values())


def option_owner(name: str) -> tuple[Axis, list[str]] | None:
    """(axis, variants taking it) of an option name; the variants are all of them for an axis-wide option."""
    for axis in registry.axes():
        if any(o.name == name for o in axis.options):
            return axis, registry.names(axis.kind)
        takers = [e.name for e in registry.REGISTRY.entries(axis.kind)
                  if any(o.name == name for o in e.options)]
        if takers:
            return axis, takers
    return None


def option_names(section: str) -> set[str]:
    """Every option name the axes of ``section`` declare."""
    return {o.name for axis in registry.axes(section) for o in options_of(axis)}


def value_field(axis: Axis) -> str:
    """The field of its section that names the axis's variant: the kind under ``model:``, else ``name``."""
    return axis.kind if axis.section == registry.MODEL else "name"


def section_axis(section: str) -> Axis:
    """The one axis of a recipe section (``train.optimizer`` -> the optimizer axis)."""
    found = registry.axes(section)
    if len(found) != 1:
        raise registry.RegistryError(f"section {section!r} must hold exactly one axis, not {len(found)}")
    return found[0]


def section_option_values(section: Any, kind: str, variant: str) -> dict[str, Any]:
    """Constructor keywords of ``variant`` of axis ``kind`` from a section's fields (``model`` or a recipe
    section): the axis-wide options and the variant's own, each by its keyword."""
    declared = registry.axis(kind)
    entry = registry.REGISTRY.entry(kind, variant) if (kind, variant) in registry.REGISTRY else None
    options = [*declared.options, *(entry.options if entry else ())]
    return {o.keyword: o.normalised(getattr(section, o.name)) for o in options}


def _option_field(option: Option) -> Any:
    """An option is typed Any in pydantic and checked by the section's validator: a variant's options are
    validated only when it is chosen. The schema shows its declared type (ablate/spec/schema.py)."""
    default = option.default if option.always else None
    return (Any, Field(default=default, description=option.doc))


def axis_fields(section: str) -> dict[str, Any]:
    """The pydantic fields of ``section``'s axes: the value field (its default and doc), then the options."""
    fields: dict[str, Any] = {}
    for axis in registry.axes(section):
        fields[value_field(axis)] = (str, Field(default=axis.default, description=axis.doc))
        for option in options_of(axis):
            fields[option.name] = _option_field(option)
    return fields


def check_axis(target: Any, axis: Axis, values: Mapping[str, Any], checks: Checks,
               involves: tuple[str, ...] = ()) -> None:
    """Check one axis of a section whose dumped ``values`` are given, failing into ``checks``; fill the
    chosen variant's options with their defaults on ``target`` (the section's model) and refuse the
    others' options. ``involves``: the section's fields a variant's ``check`` may read."""
    field = value_field(axis)
    value = values[field]
    entry = registry.REGISTRY.entry(axis.kind, value) if (axis.kind, value) in registry.REGISTRY else None
    known = registry.names(axis.kind)
    if entry is None and not axis.open_values:
        checks.fail(field, f"unknown {axis.kind} {value!r}; accepted: {', '.join(known)}"
                    + did_you_mean(axis.kind, str(value), known))
        return
    if axis.parent is not None and value != axis.default:
        parent_value = values[axis.parent]
        takers = [e.name for e in registry.REGISTRY.entries(axis.parent) if axis.kind in e.takes]
        if parent_value not in takers:
            checks.fail(field, f"{axis.kind} applies to {axis.parent}: {', '.join(takers)} only "
                        f"(this spec has {axis.parent}: {parent_value})", axis.parent)
    taken = {o.name for o in axis.options} | ({o.name for o in entry.options} if entry else set())
    for option in options_of(axis):
        given = values.get(option.name)
        if option.name in taken:
            if given is None and option.required:
                example = f"; e.g. {option.name}: {option.example}" if option.example is not None else ""
                checks.fail(field, f"{axis.kind} {value} needs {option.name}, {option.doc}{example}",
                            option.name)
            elif given is None:
                setattr(target, option.name, option.default)
            elif (problem := option.problem(given)) is not None:
                checks.fail(option.name, problem)
            else:
                setattr(target, option.name, option.normalised(given))
        elif given is not None and not (option.always and given == option.default):
            owner = option_owner(option.name)
            takers = owner[1] if owner else []
            checks.fail(option.name, f"{option.name} applies to {axis.kind}: {', '.join(takers)} only "
                        f"(this spec has {axis.kind}: {value})", field)
    if entry is not None and entry.check is not None:
        problem = entry.check({**values, **{o.name: getattr(target, o.name) for o in options_of(axis)
                                            if o.name in taken}})
        if problem:
            checks.fail(field, problem, *involves)


def identity_options(section: str, values: dict[str, Any]) -> dict[str, Any]:
    """A dumped section as a run's identity: options that do not apply (None) left out, options declared
    ``added_later`` left out at their default, and axes declared ``added_later`` left out at their default
    (a whole recipe section's value field only where nothing else of the section is left)."""
    options = {o.name: o for axis in registry.axes(section) for o in options_of(axis)}
    out = {k: v for k, v in values.items() if not (k in options and v is None)}
    for name, option in options.items():
        if option.added_later and name in out and _same(out[name], option.default):
            out.pop(name)
    for axis in registry.axes(section):
        field = value_field(axis)
        if axis.added_later and out.get(field) == axis.default:
            out.pop(field, None)
    return out


def _dotted(data: Mapping[str, Any], path: str) -> Any:
    node: Any = data
    for part in path.split("."):
        node = node.get(part) if isinstance(node, Mapping) else None
    return node


def settled_overrides(data: Mapping[str, Any], overrides: Mapping[str, Any]) -> dict[str, Any]:
    """``overrides`` of a spec's raw ``data`` (an ablation cell's), completed so that a component it swaps in
    finds no setting of the one it swaps out: where an override changes an axis's variant, the old variant's
    own options that the new one does not take are cleared (None: not given), and a sub-axis the new variant
    does not take goes back to its default (``model.ffn: swiglu`` over a GELU MLP resets
    ``model.activation``: a gated FFN fixes its own). A field the overrides set themselves is never touched,
    so a real conflict (``{model.ffn: swiglu, model.activation: gelu}``) stays an error."""
    out = dict(overrides)
    for axis in registry.axes():
        field = axis.spec_field
        if field not in overrides:
            continue
        value = overrides[field]
        entry = registry.REGISTRY.entry(axis.kind, value) if (axis.kind, value) in registry.REGISTRY else None
        taken = {o.name for o in entry.options} if entry is not None else set()
        section = field.rpartition(".")[0]
        for option in options_of(axis):
            path = f"{section}.{option.name}"
            if (option.name not in taken and all(o.name != option.name for o in axis.options)
                    and path not in overrides and _dotted(data, path) is not None):
                out[path] = None
        for sub in registry.axes():
            if sub.parent != axis.kind or sub.spec_field in overrides:
                continue
            given = _dotted(data, sub.spec_field)
            if given is not None and given != sub.default and (entry is None or sub.kind not in entry.takes):
                out[sub.spec_field] = sub.default
    return out


def ignored_fields(flat: Mapping[str, Any]) -> set[str]:
    """The dotted fields of a flattened spec that its components ignore: a sub-axis whose parent's chosen
    variant does not take it (``model.activation`` under ``model.ffn: swiglu``). A spec diff leaves them out:
    they change nothing the run computes. Values may be as logged (MLflow params are text)."""
    ignored = set()
    for sub in registry.axes():
        if sub.parent is None:
            continue
        parent = registry.axis(sub.parent)
        value = flat.get(parent.spec_field)
        if value is None:
            continue
        entry = next((e for e in registry.REGISTRY.entries(parent.kind) if e.name == str(value)), None)
        if entry is not None and sub.kind not in entry.takes:
            ignored.add(sub.spec_field)
    return ignored


def component_default(field: str, value: Any) -> bool:
    """``field`` is a component's own option and ``value`` its default (as given or as logged text): beside
    a run whose component has no such option it is the new component's setting, not a change anyone made
    (``model.glu_hidden: match_params`` where the baseline's FFN is linear), and a spec diff leaves it out."""
    section, _, name = field.rpartition(".")
    for axis in registry.axes(section):
        for option in options_of(axis):
            if option.name == name:
                return _same(value, option.default) or str(value) == str(option.default)
    return False


ABSENT = (None, "None", "—")  # an option a run's component has not: None as given, as logged, as shown


def new_components_default(field: str, base: Any, other: Any) -> bool:
    """One side has no such option (:data:`ABSENT`) and the other's is at its default: no difference in a
    spec diff (:func:`component_default`)."""
    return ((base in ABSENT and component_default(field, other))
            or (other in ABSENT and component_default(field, base)))


def _same(value: Any, default: Any) -> bool:
    """Equal as dumped (a tuple default against its JSON list)."""
    if isinstance(default, tuple):
        return isinstance(value, list | tuple) and list(value) == list(default)
    return bool(value == default)
