"""The spec commands of `ablate`: validate, list, show and schema. They read specs and the registry only,
so they answer without torch's training stack or MLflow (`ablate.cli` dispatches to them by keyword)."""

from __future__ import annotations

import difflib
import json
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import registry
from ablate.errors import AblateError
from ablate.spec.load import SpecError, dump_spec_yaml, json_schema, load_spec, ordered_problems
from registry.aliases import suggest

if TYPE_CHECKING:
    from ablate.spec.experiment import ExperimentSpec


def cmd_validate(specs: Sequence[str], overrides: Sequence[str] = ()) -> int:
    """The specs alone (`ablate validate` adds their data files: ablate/data/check.py)."""
    return validate_specs(specs, overrides)


def validate_specs(specs: Sequence[str], overrides: Sequence[str] = (),
                   check: Callable[[str, ExperimentSpec], None] | None = None) -> int:
    """Print `ok SPEC (hash)` for each valid spec, every problem of the others (exit 2); ``check`` looks
    further at a valid spec (its data files) and raises SpecError."""
    failed: list[str] = []
    for path in specs:
        try:
            spec = load_spec(path, list(overrides))
            if check is not None:
                check(path, spec)
        except SpecError as exc:
            problems = list(exc.problems)
            if check is not None and exc.partial is not None:  # its data files too, in the same pass
                try:
                    check(path, exc.partial)
                except SpecError as more:
                    problems += more.problems
            failed.extend(str(p) for p in ordered_problems(problems))
            continue
        print(f"ok {path} ({spec.spec_hash})")
    for line in failed:
        print(f"error: {line}", file=sys.stderr)
    return 2 if failed else 0


def cmd_list(kind: str | None = None, pattern: str = "*") -> int:
    kinds = [axis.kind for axis in registry.axes()]  # declaration order, plugins' axes after the built-ins
    if kind is not None and kind not in kinds:
        if pattern == "*" and (any(c in kind for c in "*?[") or registry.REGISTRY.entries(None, kind)):
            pattern = kind  # `ablate list 'c*'` or `ablate list -inf`: a name over every kind
            kind = None
        else:
            close = difflib.get_close_matches(kind, kinds, n=1)
            kind_hint = f"; did you mean {close[0]!r}?" if close else ""
            hint = _common_name_hint(registry, None, kind) or kind_hint
            raise AblateError(f"unknown component kind or name {kind!r}; kinds: {', '.join(kinds)}{hint}")
    entries = registry.REGISTRY.entries(kind, pattern)
    if not entries:
        raise AblateError(f"no component matches {pattern!r}" + (f" in {kind}" if kind else "")
                          + _common_name_hint(registry, kind, pattern))
    width = max(len(e.name) for e in entries)
    details = pattern == "*"  # a filtered list shows the matching names only
    for group in [k for k in kinds if kind in (None, k)]:
        rows = [e for e in entries if e.kind == group]
        if not rows:
            continue
        axis = registry.axis(group)
        print(group)
        if details:
            for line in _axis_lines(axis, registry):
                print(f"    {line}")
        for e in rows:
            options = ", ".join(f"{o.name}=" + (f"required, e.g. {o.example}" if o.required else
                                                 _option_value(o.default)) for o in e.options)
            print(f"  {e.name:<{width}}  {e.summary}{f'  [{options}]' if options else ''}".rstrip())
        if group == "mask":
            print(f"  {'':<{width}}  (any other negative number is accepted too, e.g. -1e6, -1e10)")
        if group == "attention":
            print(f"  {'':<{width}}  (sdpa may run as torch's fused kernel or as two matmuls where those are "
                  "faster: the same function, an implementation detail recorded in the run, not a variant)")
    return 0


def _common_name_hint(registry: Any, kind: str | None, name: str) -> str:
    """`ablate list layernorm`: "; did you mean norm 'builtin'?" (registry/aliases.py's common names)."""
    for group in [kind] if kind else [a.kind for a in registry.axes()]:
        hint = suggest(group, name, registry.names(group))
        if hint is not None and hint != name:
            return f"; did you mean {group} {hint!r}?"
    return ""


def _axis_lines(axis: Any, registry: Any) -> list[str]:
    """What `ablate list` says of an axis: its field, default, contract, hook sites and axis-wide options."""
    lines = [f"{axis.spec_field} (default {axis.default}): {axis.doc}", f"contract: {axis.contract}"]
    lines += [f"hook: {hook}" for hook in axis.hooks]
    if axis.parent is not None:
        takers = [e.name for e in registry.REGISTRY.entries(axis.parent) if axis.kind in e.takes]
        lines.append(f"taken by {axis.parent}: {', '.join(takers)}")
    lines += [f"option {o.name}={_option_value(o.default)}: {o.doc}" for o in axis.options]
    return lines


def _option_value(value: Any) -> str:
    return str(value).lower() if isinstance(value, bool) else str(value)


def cmd_show(spec_path: str, overrides: Sequence[str] = ()) -> int:
    spec = load_spec(spec_path, list(overrides))
    print(f"# resolved from {spec_path}" + "".join(f" --set {o}" for o in overrides))
    print(f"# spec_hash: {spec.spec_hash}")
    sys.stdout.write(dump_spec_yaml(spec))
    return 0


def cmd_schema(out: str | None = None) -> int:
    text = json.dumps(json_schema(), indent=2) + "\n"
    if out:
        Path(out).write_text(text)
        print(f"wrote {out}")
    else:
        sys.stdout.write(text)
    return 0
