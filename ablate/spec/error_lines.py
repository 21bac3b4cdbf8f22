"""Pydantic errors -> one readable line each, plus the spec's field tree (did-you-mean).

Every message says what was found and what is accepted:

    x.yaml:7: model.d_modle: unknown key 'd_modle'; did you mean 'd_model'?
    x.yaml:9: train.precision: found 'fp31'; accepted: auto, fp32, bf16, fp16; did you mean 'fp32'?
"""

from __future__ import annotations

import difflib
import re
import types
import typing
from typing import Annotated, Any, Union, get_args, get_origin

from pydantic import BaseModel
from pydantic_core import ErrorDetails

from ablate.spec.experiment import NAME_PATTERN, ExperimentSpec, SpecFieldError
from ablate.spec.yamlsrc import Problem, SourceMap


# ---------------------------------------------------------------- the field tree
def _unwrap(ann: Any) -> Any:
    """Strip Annotated[...] and Optional[...]; of a union keep its structured member (model, dict, list)."""
    while True:
        origin = get_origin(ann)
        if origin is Annotated:
            ann = get_args(ann)[0]
        elif origin in (Union, types.UnionType):
            members = [a for a in get_args(ann) if a is not type(None)]
            structured = [a for a in members if _model(a) or get_origin(_strip(a)) in (dict, list, tuple)]
            ann = (structured or members)[0]
        else:
            return ann


def _strip(ann: Any) -> Any:
    return get_args(ann)[0] if get_origin(ann) is Annotated else ann


def _model(ann: Any) -> type[BaseModel] | None:
    ann = _strip(ann)
    return ann if isinstance(ann, type) and issubclass(ann, BaseModel) else None


class _NoField(LookupError):
    def __init__(self, accepted: list[str] | None) -> None:
        super().__init__()
        self.accepted = accepted


def _members(ann: Any) -> list[Any]:
    """A union's structured members (models first), else the annotation itself."""
    while get_origin(ann) is Annotated:
        ann = get_args(ann)[0]
    if get_origin(ann) not in (Union, types.UnionType):
        return [ann]
    members = [a for a in get_args(ann) if a is not type(None)]
    models = [a for a in members if _model(a)]
    return models + [a for a in members if a not in models] if len(members) > 1 else members


def _step(ann: Any, part: str) -> Any:
    members = _members(ann)
    if len(members) > 1:  # `list[int] | SeedRange`: the first member that has the part
        accepted: list[str] | None = None
        for member in members:
            try:
                return _step(member, part)
            except _NoField as exc:
                accepted = accepted or exc.accepted
        raise _NoField(accepted)
    ann = _unwrap(ann)
    model = _model(ann)
    if model is not None:
        if part not in model.model_fields:
            raise _NoField(list(model.model_fields))
        return model.model_fields[part].annotation
    origin, args = get_origin(ann), get_args(ann)
    if ann is Any or ann is typing.Any:
        return Any
    if origin is dict:
        return args[1] if args else Any
    if origin is list and part.isdigit():
        return args[0] if args else Any
    if origin is tuple and part.isdigit() and int(part) < len(args):
        return args[int(part)]
    raise _NoField(None)


def fields_at(parts: list[str]) -> list[str] | None:
    """The keys accepted at a path (None where any key goes, e.g. inside ablation.axes)."""
    ann: Any = ExperimentSpec
    try:
        for part in parts:
            ann = _step(ann, part)
    except _NoField:
        return None
    model = next((m for m in map(_model, _members(ann)) if m is not None), None) or _model(_unwrap(ann))
    return list(model.model_fields) if model is not None else None


def check_field_path(dotted: str) -> str | None:
    """None if `dotted` names a spec field (an ablation axis, a search dimension), else why not."""
    parts = dotted.split(".")
    ann: Any = ExperimentSpec
    for i, part in enumerate(parts):
        try:
            ann = _step(ann, part)
        except _NoField as exc:
            prefix = ".".join(parts[:i])
            if exc.accepted is None:
                return f"{dotted!r} is not a spec field: {prefix} has no sub-fields"
            return f"{dotted!r} is not a spec field" + _did_you_mean(part, exc.accepted, prefix)
    return None


def _did_you_mean(word: str, choices: list[str], prefix: str = "") -> str:
    close = difflib.get_close_matches(str(word), [str(c) for c in choices], n=1, cutoff=0.6)
    if close:
        return f"; did you mean {(prefix + '.' if prefix else '') + close[0]!r}?"
    return ""


# ---------------------------------------------------------------- error messages
def show(value: Any) -> str:
    """A found value as the user wrote it in YAML."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, dict):
        return "a mapping"
    if isinstance(value, list):
        text = repr(value)
        return f"the list {text if len(text) <= 40 else text[:37] + '...'}"
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


_EXPECTED = {
    "int_parsing": "an integer",
    "int_type": "an integer",
    "int_from_float": "a whole number",
    "float_parsing": "a number",
    "float_type": "a number",
    "finite_number": "a finite number",
    "bool_parsing": "true or false",
    "bool_type": "true or false",
    "string_type": "a string",
    "list_type": "a list",
    "tuple_type": "a list",
    "model_type": "a mapping (indented key: value lines)",
    "dict_type": "a mapping (indented key: value lines)",
    "model_attributes_type": "a mapping",
}
_BOUNDS = {
    "greater_than": ("gt", ">"),
    "greater_than_equal": ("ge", ">="),
    "less_than": ("lt", "<"),
    "less_than_equal": ("le", "<="),
}


def _message(err: ErrorDetails, parts: list[str]) -> str:
    kind, msg, ctx = err["type"], err["msg"], err.get("ctx") or {}
    found = show(err.get("input"))
    if kind == "extra_forbidden":
        key = parts[-1]
        accepted = fields_at(parts[:-1]) or []
        hint = _did_you_mean(key, accepted)
        return f"unknown key {key!r}" + (hint or (f"; accepted: {', '.join(accepted)}" if accepted else ""))
    if kind == "missing":
        if parts == ["name"]:
            return "required: name the experiment (letters, digits, '_', '.', '-'; no '/')"
        return "required, but missing"
    if kind in ("value_error", "assertion_error"):
        error = ctx.get("error")
        return str(error) if error is not None else re.sub(r"^(Value|Assertion) error, ", "", msg)
    if kind == "literal_error":
        values = re.findall(r"'((?:[^'\\]|\\.)*)'", str(ctx.get("expected", "")))
        found_text = err.get("input")
        hint = _did_you_mean(found_text, values) if isinstance(found_text, str) else ""
        return f"found {found}; accepted: {', '.join(values)}{hint}"
    if kind == "string_pattern_mismatch" and ctx.get("pattern") == NAME_PATTERN:
        return (
            f"found {found}; expected 1-100 letters, digits, '_', '.' or '-', starting with a letter "
            "or digit (it names folders and MLflow runs)"
        )
    if kind == "int_parsing_size":
        return f"found {found}; the number is too large"
    if kind in _BOUNDS:
        key, sign = _BOUNDS[kind]
        return f"found {found}; expected a value {sign} {ctx.get(key)}"
    if kind in _EXPECTED:
        return f"found {found}; expected {_EXPECTED[kind]}"
    expected = re.sub(r"^Input should be ", "expected ", msg)
    return f"found {found}; {expected[:1].lower() + expected[1:]}"


def explain(err: ErrorDetails, smap: SourceMap, origin: str) -> list[tuple[Problem, tuple[str, ...]]]:
    """One pydantic error -> its problems, each at the line of the offending value (or its parent), with
    the dotted paths of every field the problem depends on (a cross-field check reads several)."""
    parts = [str(p) for p in err["loc"]]
    at = ".".join(parts)
    error = (err.get("ctx") or {}).get("error")
    if isinstance(error, SpecFieldError):  # cross-field checks, each blaming one field
        out = []
        for issue in error.issues:
            path = ".".join(parts + issue.field.split("."))
            involves = tuple(".".join(parts + field.split(".")) for field in issue.involves)
            out.append((Problem(smap.where(path, origin), path, issue.message), involves))
        return out
    return [(Problem(smap.where(at, origin), at, _message(err, parts)), (at,))]


def format_error(err: ErrorDetails, smap: SourceMap, origin: str) -> Problem:
    """One pydantic error -> a Problem at the line where the offending value (or its parent) was written."""
    return explain(err, smap, origin)[0][0]


# ---------------------------------------------------------------- union members
# Pydantic tries each member of a union (`seeds: list[int] | SeedRange`) and puts the member's tag in the
# error's location ('list[constrained-int]', 'function-after[_order(), SeedRange]'). The user wrote no such
# key: the tag is dropped from the location, and where the value is of one member's kind, the other
# members' "expected a list" errors are dropped with it (the value was meant as the member it fits).
_TAG = re.compile(r"^(int|float|str|bool|none|[a-z][a-z-]*\[.*\]|[a-z]+-[a-z-]+|[A-Z][A-Za-z]+)$")
_TYPE_ONLY = set(_EXPECTED) | {"literal_error", "is_instance_of", "none_required"}


def clean_union_errors(errors: list[ErrorDetails], data: Any) -> list[ErrorDetails]:
    """`errors` with union tags out of their locations and the members the value does not fit left out."""
    cleaned: list[tuple[ErrorDetails, tuple[str, ...] | None, str]] = []
    for err in errors:
        node: Any = data
        loc: list[Any] = []
        union: tuple[str, ...] | None = None
        tag = ""
        for part in err["loc"]:
            if isinstance(node, dict) and part in node:
                node = node[part]
            elif isinstance(node, list) and isinstance(part, int) and 0 <= part < len(node):
                node = node[part]
            elif isinstance(part, str) and _TAG.match(part):
                if union is None:
                    union, tag = tuple(str(p) for p in loc), part
                continue
            else:
                node = None
            loc.append(part)
        cleaned.append(({**err, "loc": tuple(loc)}, union, tag))
    fitting: dict[tuple[str, ...], set[str]] = {}  # union -> tags with an error other than the wrong type
    for err, union, tag in cleaned:
        if union is not None and not (err["type"] in _TYPE_ONLY and tuple(map(str, err["loc"])) == union):
            fitting.setdefault(union, set()).add(tag)
    out: list[ErrorDetails] = []
    alternatives: dict[tuple[Any, ...], list[str]] = {}  # loc -> what each member expected
    for err, union, tag in cleaned:
        if union is not None and fitting.get(union) and tag not in fitting[union]:
            continue
        if union is not None and err["type"] in _TYPE_ONLY:
            values = re.findall(r"'((?:[^'\\]|\\.)*)'", str((err.get("ctx") or {}).get("expected", "")))
            expected = _EXPECTED.get(err["type"], " or ".join(repr(v) for v in values) or "another value")
            if err["loc"] in alternatives:
                alternatives[err["loc"]].append(expected.split(" (")[0])
                continue
            alternatives[err["loc"]] = [expected.split(" (")[0]]
        if err not in out:
            out.append(err)
    for i, err in enumerate(out):
        kinds = list(dict.fromkeys(alternatives.get(err["loc"], [])))
        if len(kinds) > 1:
            why = f"found {show(err.get('input'))}; expected {' or '.join(kinds)}"
            out[i] = {**err, "type": "value_error", "msg": why, "ctx": {"error": why}}
    return out


# ---------------------------------------------------------------- every problem in one pass
# Pydantic skips a model's cross-field checks once any of its fields failed. The loader therefore
# validates again with each failed value removed (its default takes its place): the cross checks then
# run, and a problem that depends on a removed value is dropped (it would be judged on a default).
def touches(involves: tuple[str, ...], removed: set[str]) -> bool:
    """Whether a problem depending on `involves` depends on a removed value (equal, inside or around it)."""
    return any(p == r or p.startswith(r + ".") or r.startswith(p + ".") for p in involves for r in removed)


def remove_failed(data: dict[str, Any], err: ErrorDetails) -> set[str]:
    """Remove from `data` (in place) what `err` blames; returns the dotted paths now unreliable."""
    loc = [str(p) for p in err["loc"]]
    error = (err.get("ctx") or {}).get("error")
    if isinstance(error, SpecFieldError):  # a cross check: the blamed fields go, else the others it read
        blamed = [loc + issue.field.split(".") for issue in error.issues]
        removed = {p for p in (_delete(data, path, exact=True) for path in blamed) if p is not None}
        if removed:
            return removed | {".".join(path) for path in blamed}
        read = [loc + field.split(".") for issue in error.issues for field in issue.involves]
        removed = {p for p in (_delete(data, path, exact=True) for path in read) if p is not None}
        if not removed and loc:
            removed = {p for p in [_delete(data, loc, exact=False)] if p is not None}
        return removed | {".".join(path) for path in read}
    if loc == ["name"] and "name" not in data:  # required at the top: a stand-in lets the rest be checked
        data["name"] = "unnamed"
        return {"name"}
    deleted = _delete(data, loc, exact=False)
    return {".".join(loc)} | ({deleted} if deleted else set())


def _delete(data: dict[str, Any], parts: list[str], exact: bool) -> str | None:
    """Delete the value at `parts` (not `exact`: the deepest mapping key on the way that is present, a list
    whole); returns its dotted path, None when nothing was deleted."""
    node: Any = data
    walked: list[str] = []
    deepest: tuple[dict[str, Any], str, int] | None = None
    for part in parts:
        if isinstance(node, dict) and part in node:
            deepest = (node, part, len(walked) + 1)
        elif not (isinstance(node, list) and part.isdigit() and int(part) < len(node)):
            break
        walked.append(part)
        node = node[part] if isinstance(node, dict) else node[int(part)]
    if deepest is None or (exact and (len(walked) < len(parts) or deepest[2] != len(parts))):
        return None
    parent, key, depth = deepest
    del parent[key]
    return ".".join(walked[:depth])
