"""YAML spec files -> a validated `ExperimentSpec`, every problem reported at once with file and line.

    experiments/x.yaml:14: model.residual: unknown residual 'postnorm'; accepted: post_norm, pre_norm; ...

A file may `extends:` one or more other files (paths relative to it; deep merge, the child wins), and
`--set a.b=c` overrides any field after that (the value is read as YAML: `3`, `1e-3`, `true`, `[1, 2]`).
`data.files.root` may hold `${VAR}` / `${VAR:-default}`: it stays unexpanded in the spec (so the spec and its
hash are the same on every machine) and `ablate.data.corpus` expands it when it reads the files. Loading reads
files and never writes anything.
"""

from __future__ import annotations

import copy
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from pydantic import ValidationError
from pydantic_core import ErrorDetails

import registry
from ablate import hardware
from ablate.spec.axis_fields import settled_overrides
from ablate.spec.axis_levels import level_fields
from ablate.spec.error_lines import (
    check_field_path,
    clean_union_errors,
    explain,
    remove_failed,
    show,
    touches,
)
from ablate.spec.experiment import ExperimentSpec, SpecFieldError
from ablate.spec.schema import json_schema as build
from ablate.spec.study_sections import RUNG_TOKENS
from ablate.spec.yamlsrc import (
    Loc,
    MaskText,
    Parsed,
    Problem,
    SourceMap,
    SpecError,
    YamlFatal,
    dump_yaml,
    is_invalid,
    join,
    parse_value,
    parse_yaml,
)

__all__ = [
    "Problem", "SourceMap", "SpecError", "apply_overrides", "dump_spec_yaml", "json_schema",
    "load_spec", "load_spec_data", "set_dotted", "validate_data",
]


class _Stop(Exception):
    """A problem after which nothing more can be checked (unreadable file, extends cycle)."""


class _Collector:
    def __init__(self) -> None:
        self.problems: list[Problem] = []
        self.bad_paths: set[str] = set()

    def add(self, problem: Problem) -> None:
        self.problems.append(problem)

    def stop(self, problem: Problem) -> _Stop:
        self.problems.append(problem)
        return _Stop()

    def take(self, parsed: Parsed) -> None:
        self.problems.extend(parsed.problems)
        self.bad_paths |= parsed.bad_paths


# ---------------------------------------------------------------- files and extends
def _display(path: str) -> str:
    return os.path.normpath(path)


def _load_file(
    path: str, chain: list[tuple[str, str]], out: _Collector, at: str = ""
) -> tuple[dict[str, Any], SourceMap]:
    """One file with its `extends:` parents merged in (parents first, the file wins)."""
    shown = _display(path)
    try:
        raw = Path(path).read_bytes()
    except FileNotFoundError:
        raise out.stop(Problem(at or shown, "extends" if at else "", f"file not found: {shown}")) from None
    except OSError as exc:
        raise out.stop(Problem(at or shown, "", f"cannot read {shown}: {exc.strerror or exc}")) from None
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise out.stop(Problem(shown, "", f"not UTF-8 text (byte {exc.start})")) from None
    try:
        parsed = parse_yaml(text, shown)
    except YamlFatal as fatal:
        raise out.stop(fatal.problem) from None
    out.take(parsed)
    data, smap = parsed.data, parsed.source_map
    smap.set("", Loc(shown, 1))  # a missing key is reported at the top of the file
    if data is None:
        raise out.stop(
            Problem(f"{shown}:1", "", "the file is empty; a spec is a mapping with at least 'name:'")
        )
    if not isinstance(data, dict):
        kind = "a list" if isinstance(data, list) else f"the {type(data).__name__} {data!r}"
        raise out.stop(
            Problem(
                f"{shown}:1",
                "",
                f"a spec is a mapping of sections (name, data, model, train, ...), found {kind}",
            )
        )
    if "extends" not in data:
        return data, smap
    parents = data.pop("extends")
    where = smap.where("extends", shown)
    if isinstance(parents, str):
        parents = [parents]
    if not isinstance(parents, list) or not parents or not all(isinstance(p, str) and p for p in parents):
        raise out.stop(
            Problem(where, "extends", f"expected a file name or a list of file names, found {parents!r}")
        )
    merged: dict[str, Any] = {}
    merged_map = SourceMap()
    chain = chain + [(os.path.realpath(path), shown)]
    for parent in parents:
        target = parent if os.path.isabs(parent) else os.path.join(os.path.dirname(path), parent)
        reals = [real for real, _ in chain]
        if os.path.realpath(target) in reals:
            start = reals.index(os.path.realpath(target))
            loop = " -> ".join([name for _, name in chain[start:]] + [_display(target)])
            raise out.stop(Problem(where, "extends", f"cycle: {loop}"))
        if not os.path.exists(target):
            looked = f" (looked for {_display(target)})" if _display(target) != _display(parent) else ""
            raise out.stop(Problem(where, "extends", f"file not found: {parent!r}{looked}"))
        parent_data, parent_map = _load_file(target, chain, out, at=where)
        merged = _merge(merged, parent_data, merged_map, parent_map, "")
    return _merge(merged, data, merged_map, smap, ""), merged_map


def _merge(
    base: dict[str, Any], child: dict[str, Any], base_map: SourceMap, child_map: SourceMap, path: str
) -> dict[str, Any]:
    """Deep merge: mappings merge key by key, anything else (lists included) is replaced by the child's."""
    out = dict(base)
    for key, value in child.items():
        sub = join(path, key)
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = _merge(out[key], value, base_map, child_map, sub)
        else:
            out[key] = copy.deepcopy(value)
            base_map.drop_under(sub)
    if not path:
        base_map.update(child_map)
    return out


# ---------------------------------------------------------------- --set overrides
def set_dotted(data: dict[str, Any], key: str, value: Any) -> None:
    """`data['a']['b'] = value` for key 'a.b', creating missing mappings; list items by index ('seeds.0')."""
    parts = key.split(".")
    node: Any = data
    for i, part in enumerate(parts[:-1]):
        nxt = _child(node, part)
        if nxt is None:
            if not isinstance(node, dict):
                raise KeyError(f"{'.'.join(parts[: i + 1])} is out of range")
            node[part] = nxt = {}
        elif not isinstance(nxt, dict | list):
            raise KeyError(f"{'.'.join(parts[: i + 1])} is {nxt!r}, not a mapping")
        node = nxt
    last = parts[-1]
    if isinstance(node, list):
        if not (last.isdigit() and int(last) < len(node)):
            raise KeyError(f"{'.'.join(parts[:-1])} has no item {last}")
        node[int(last)] = value
    else:
        node[last] = value


def _child(node: Any, part: str) -> Any:
    if isinstance(node, dict):
        return node.get(part)
    if isinstance(node, list) and part.isdigit() and int(part) < len(node):
        return node[int(part)]
    return None


def _apply(
    data: dict[str, Any], overrides: Sequence[str], smap: SourceMap, out: _Collector
) -> dict[str, Any]:
    data = copy.deepcopy(data)
    for text in overrides:
        where = f"--set {text}"
        key, eq, raw = text.partition("=")
        key = key.strip()
        if not eq:
            out.add(Problem(where, "", "expected KEY=VALUE, e.g. --set model.d_model=256"))
            continue
        if not key or any(not part.strip() for part in key.split(".")) or " " in key:
            out.add(
                Problem(
                    where, "", f"bad key {key!r}: expected a dotted field path such as train.optimizer.lr"
                )
            )
            continue
        if key == "extends" or key.startswith("extends."):
            out.add(Problem(where, key, "extends can only be written in a spec file"))
            continue
        value, problems = parse_value(raw, where, key)
        if problems:  # the value is not applied: the file's value is still checked as usual
            out.problems.extend(problems)
            continue
        try:
            set_dotted(data, key, None if is_invalid(value) else value)
        except KeyError as exc:
            out.add(Problem(where, key, f"cannot set it: {exc.args[0]}"))
            continue
        smap.drop_under(key)
        smap.set(key, Loc(where))
    return data


def apply_overrides(data: dict[str, Any], overrides: Sequence[str]) -> dict[str, Any]:
    """A copy of `data` with `--set` overrides applied ("a.b=c", c read as YAML); raises SpecError."""
    out = _Collector()
    result = _apply(data, overrides, SourceMap(), out)
    if out.problems:
        raise SpecError(out.problems)
    return result


def _gather(path: str | Path, overrides: Sequence[str], out: _Collector) -> tuple[dict[str, Any], SourceMap]:
    try:
        data, smap = _load_file(str(path), [], out)
    except _Stop:
        raise SpecError(out.problems) from None
    data = _apply(data, overrides, smap, out)
    return data, smap


def load_spec_data(path: str | Path, overrides: Sequence[str] = ()) -> tuple[dict[str, Any], SourceMap]:
    """The raw merged data (extends and --set applied, not validated) and where each value came from."""
    out = _Collector()
    data, smap = _gather(path, overrides, out)
    if out.problems:
        raise SpecError(out.problems)
    return data, smap


def load_spec(
    path: str | Path, overrides: Sequence[str] = (), *, check_hardware: bool = True
) -> ExperimentSpec:
    """Load, merge, override and validate a spec file; raises SpecError listing every problem.

    `check_hardware`: also reject a train.precision this machine cannot run (off to read a finished run's
    spec on another machine); it is never part of the spec or its hash.
    """
    out = _Collector()
    data, smap = _gather(path, overrides, out)
    return _validate(data, smap, _display(str(path)), out, check_hardware)


# ---------------------------------------------------------------- validation
MAX_ROUNDS = 8  # validations per spec: each one removes at least one failed value


def validate_data(
    data: dict[str, Any], source_map: SourceMap | None, origin: str, *, check_hardware: bool = True
) -> ExperimentSpec:
    """Validate already-merged data (e.g. an ablation cell); `origin` names it where no line is known."""
    return _validate(data, source_map or SourceMap(), origin, _Collector(), check_hardware)


def _validate(
    data: dict[str, Any], smap: SourceMap, origin: str, out: _Collector, check_hardware: bool
) -> ExperimentSpec:
    """Every problem in one pass: after a failed validation the failed values are removed and the data is
    validated again, so that cross-field checks run too (ablate/spec/error_lines.py ``remove_failed``)."""
    registry.load_plugins()  # a broken plugin is an error here too, even for a spec naming only defaults
    spec: ExperimentSpec | None = None
    current, removed = data, set(out.bad_paths)
    first: list[ErrorDetails] = []
    for _ in range(MAX_ROUNDS):
        try:
            spec = ExperimentSpec.model_validate(current)
            break
        except ValidationError as exc:
            errors = clean_union_errors(exc.errors(), current)
        first = first or errors
        for err in errors:
            found = explain(err, smap, origin)
            out.problems.extend(problem for problem, involves in found if not touches(involves, removed))
        current = copy.deepcopy(current) if current is data else current
        before = len(removed)
        for err in errors:
            removed |= remove_failed(current, err)
        if len(removed) == before:
            break
    bad_axes = _check_paths(data, smap, origin, out)
    if spec is not None and spec.ablation is not None:
        _check_axis_values(spec, current, smap, origin, out, bad_axes, removed, check_hardware)
    if spec is not None and check_hardware and not touches(("train.precision",), removed):
        out.problems.extend(_precision(spec, smap, origin))
    if check_hardware and (gemm := hardware.cpu_gemm_problem()) is not None:
        out.problems.append(Problem("environment", hardware.CPU_GEMM_ENV, gemm))
    if out.problems or spec is None or current is not data:
        if not out.problems:  # never an empty error: say what pydantic said
            out.problems.extend(problem for err in first for problem, _ in explain(err, smap, origin))
        error = SpecError(ordered_problems(out.problems))
        if spec is not None and not touches(("data",), removed | set(out.bad_paths)) and not any(
                p.path.split(".")[0] == "data" for p in error.problems):
            error.partial = spec
        raise error
    return spec


def _precision(spec: ExperimentSpec, smap: SourceMap, origin: str) -> list[Problem]:
    """train.precision against what this machine runs (ablate/hardware.py), reported like any field."""
    at, precision = "train.precision", spec.train.precision
    reason = hardware.precision_problem(precision)
    if reason is None:
        return []
    accepted = ", ".join(hardware.runnable_precisions())
    return [Problem(smap.where(at, origin), at, f"found {show(precision)}; {reason}; accepted: {accepted}")]


def ordered_problems(problems: list[Problem]) -> list[Problem]:
    """Unique, in file/line order; `--set` problems (no line) after the file's."""

    def key(p: Problem) -> tuple[int, str, int]:
        source, _, line = p.where.rpartition(":")
        if source and line.isdigit():
            return (0, source, int(line))
        return (1, "", 0)

    return sorted(dict.fromkeys(problems), key=key)


def _section(data: dict[str, Any], *keys: str) -> dict[str, Any]:
    node: Any = data
    for key in keys:
        node = node.get(key) if isinstance(node, dict) else None
    return node if isinstance(node, dict) else {}


def _check_paths(data: dict[str, Any], smap: SourceMap, origin: str, out: _Collector) -> set[str]:
    """Ablation axes and search dimensions must name spec fields (checked even when the rest is invalid)."""
    bad: set[str] = set()
    rungs = _section(data, "ablation", "scales", "rungs")
    axes = _section(data, "ablation", "axes")
    levels = {str(name): values for name, values in axes.items() if isinstance(values, dict)}
    for section, keys in (
        ("ablation.axes", {k: v for k, v in axes.items() if str(k) not in levels}),
        *((f"ablation.axes.{name}.{level}", level_fields(fields))
          for name, values in levels.items() for level, fields in values.items() if isinstance(fields, dict)),
        ("search.space", _section(data, "search", "space")),
        ("ablation.tune.space", _section(data, "ablation", "tune", "space")),
        ("ablation.confirm.overrides", _section(data, "ablation", "confirm", "overrides")),
        *((f"ablation.scales.rungs.{name}", _section(rungs, str(name))) for name in rungs),
    ):
        for key in keys:
            if section.startswith("ablation.scales.") and key == RUNG_TOKENS:
                continue  # a rung's own key: the tokens its cells train on
            error = check_field_path(str(key))
            if error:
                path = f"{section}.{key}"
                out.add(Problem(smap.where(path, origin), path, error))
                bad.add(path.removeprefix("ablation.axes.") if section != "ablation.axes" else str(key))
    return bad


def _check_axis_values(
    spec: ExperimentSpec, data: dict[str, Any], smap: SourceMap, origin: str, out: _Collector, skip: set[str],
    removed: set[str], check_hardware: bool,
) -> None:
    """Each axis value, set alone on the base spec, must give a valid spec (caught before any run starts).

    In a full factorial a cross-field error (d_model vs heads) may be fixed by another axis in the same
    cell, so only errors of the value itself are reported there. Errors that depend on a value removed
    from an invalid base spec are left out (the base's own problem is reported already).
    """
    assert spec.ablation is not None
    base = {k: v for k, v in data.items() if k not in ("ablation", "search")}
    for key, values in spec.ablation.axes.items():
        if key in skip:
            continue
        if isinstance(values, dict):  # named levels: each sets its fields
            levels = [(join(f"ablation.axes.{key}", name), level_fields(fields))
                      for name, fields in values.items()]
        else:
            levels = [(join(f"ablation.axes.{key}", i), {key: value}) for i, value in enumerate(values)]
        for path, fields in levels:
            if any(f"{path.removeprefix('ablation.axes.')}.{field}" in skip for field in fields):
                continue  # a field that is no spec field: reported already
            # the axis sets its fields: a problem of the base spec's own value of one is not the base's
            unreliable = {r for r in removed if not any(r == f or r.startswith(f + ".") for f in fields)}
            _check_level(spec.ablation.design, base, path, fields, smap, origin, out, unreliable,
                         check_hardware)


def _check_level(design: str, base: dict[str, Any], path: str, fields: dict[str, Any], smap: SourceMap,
                 origin: str, out: _Collector, unreliable: set[str], check_hardware: bool) -> None:
    """One axis value (or named level) set on the base spec, as the study derives its cell."""
    cell = copy.deepcopy(base)
    subs: list[Problem] = []
    shown = ", ".join(f"{k}: {show(v)}" for k, v in fields.items())
    try:
        for key, value in settled_overrides(base, fields).items():
            set_dotted(cell, key, value)
        cell_spec = ExperimentSpec.model_validate(cell)
        if check_hardware and "train.precision" in fields:
            subs = _precision(cell_spec, SourceMap(), "")
    except KeyError as exc:
        out.add(Problem(smap.where(path, origin), path, f"cannot set {shown}: {exc.args[0]}"))
    except ValidationError as exc:
        for err in clean_union_errors(exc.errors(), cell):
            cross = isinstance((err.get("ctx") or {}).get("error"), SpecFieldError)
            for p, involves in explain(err, SourceMap(), ""):
                # in a factorial another axis may fix a cross check, unless it reads this level's fields only
                if design == "full_factorial" and cross and not set(involves) <= set(fields):
                    continue
                if not touches(involves, unreliable):
                    subs.append(p)
    for sub in subs:
        message = f"{shown} gives an invalid spec: {sub.path}: {sub.message}"
        out.add(Problem(smap.where(path, origin), path, message))


# ---------------------------------------------------------------- output
def dump_spec_yaml(spec: ExperimentSpec) -> str:
    """The resolved spec (defaults filled in) as YAML that loads back to the same spec and hash."""
    data = spec.resolved()
    data["model"]["mask"] = MaskText(data["model"]["mask"])
    return dump_yaml(data)


def json_schema() -> dict[str, Any]:
    return build()
