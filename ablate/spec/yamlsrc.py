"""YAML text -> plain data, plus where every value came from (file and line).

`yaml.safe_load` semantics only: the text is composed into nodes with the safe loader and every node is
converted here, so that each dotted path keeps its line number and nothing but plain data can come out.
Two deliberate refinements over `safe_load`, both stricter or friendlier, never less safe:

- YAML 1.2 floats: `1e-3` and `-1e9` are numbers (YAML 1.1 reads them as strings, which turns
  `choice: [1e-4, 3e-4]` into strings);
- duplicate keys, non-standard tags (`!!python/object`), numbers that overflow (`1e400`, `10**30`) and
  recursive aliases are reported as problems instead of being silently accepted or crashing.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, cast

import yaml
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

from ablate.errors import AblateError

CORE = "tag:yaml.org,2002:"
# The tags plain data is made of; a timestamp is read back as the string the user wrote.
ALLOWED_TAGS = {f"{CORE}{t}" for t in ("str", "int", "float", "bool", "null", "map", "seq", "timestamp")}
MAX_NODES = 200_000  # an alias "billion laughs" expands past this long before it costs memory
MAX_BYTES = 5_000_000
INT_LIMIT = 2**63  # anything larger cannot be a sensible setting and overflows torch/numpy

_FLOAT_12 = re.compile(r"^[-+]?(?:[0-9][0-9_]*(?:\.[0-9_]*)?|\.[0-9_]+)[eE][-+]?[0-9]+$")


class SpecLoader(yaml.SafeLoader):
    """The safe loader, plus YAML 1.2 exponent floats (`1e-3`, `-1e9`)."""


class SpecDumper(yaml.SafeDumper):
    """The safe dumper with the same resolver, so a string like '1e5' is quoted and reads back as a string."""


for _cls in (SpecLoader, SpecDumper):
    _cls.add_implicit_resolver(f"{CORE}float", _FLOAT_12, list("-+0123456789."))


# ---------------------------------------------------------------- problems and source locations
@dataclass(frozen=True)
class Problem:
    """One user-facing problem: where (`file:line` or `--set a.b=c`), the dotted field path, what is wrong."""

    where: str
    path: str
    message: str

    def __str__(self) -> str:
        return f"{self.where}: {self.path}: {self.message}" if self.path else f"{self.where}: {self.message}"


class SpecError(AblateError):
    """An invalid spec: ``problems`` holds every problem found, ``str()`` gives one line per problem."""

    def __init__(self, problems: Iterable[Problem | str]) -> None:
        self.problems: list[Problem] = [
            p if isinstance(p, Problem) else Problem("spec", "", str(p)) for p in problems
        ]
        # the spec as validated with the failed values taken out, where none of them was in `data`: its
        # data files can still be checked in the same pass (`ablate validate`)
        self.partial: Any = None
        super().__init__("\n".join(str(p) for p in self.problems))


@dataclass(frozen=True)
class Loc:
    source: str  # a file name as the user sees it, or "--set a.b=c"
    line: int | None = None

    def __str__(self) -> str:
        return f"{self.source}:{self.line}" if self.line is not None else self.source


class SourceMap:
    """Dotted path -> where its value was written. A path with no entry borrows its nearest parent's."""

    def __init__(self, locs: dict[str, Loc] | None = None) -> None:
        self._locs: dict[str, Loc] = dict(locs or {})

    def set(self, path: str, loc: Loc) -> None:
        self._locs[path] = loc

    def drop_under(self, path: str) -> None:
        """Forget `path` and everything below it (its value was replaced)."""
        prefix = path + "."
        for key in [k for k in self._locs if k == path or k.startswith(prefix)]:
            del self._locs[key]

    def update(self, other: SourceMap) -> None:
        self._locs.update(other._locs)

    def lookup(self, path: str) -> Loc | None:
        parts = path.split(".") if path else []
        for n in range(len(parts), -1, -1):
            loc = self._locs.get(".".join(parts[:n]))
            if loc is not None:
                return loc
        return None

    def where(self, path: str, default: str = "spec") -> str:
        loc = self.lookup(path)
        return str(loc) if loc is not None else default

    def copy(self) -> SourceMap:
        return SourceMap(self._locs)

    def __iter__(self) -> Iterator[str]:
        return iter(self._locs)


def join(path: str, key: object) -> str:
    return f"{path}.{key}" if path else str(key)


def short_tag(tag: str) -> str:
    return "!!" + tag[len(CORE) :] if tag.startswith(CORE) else tag


# ---------------------------------------------------------------- parsing
class YamlFatal(Exception):
    """The text cannot be read at all (syntax error, too big): nothing after it can be checked."""

    def __init__(self, problem: Problem) -> None:
        super().__init__(str(problem))
        self.problem = problem


_INVALID = object()  # a value already reported as a problem: left out of the data


@dataclass
class Parsed:
    data: Any  # None for an empty document
    source_map: SourceMap
    problems: list[Problem]
    bad_paths: set[str]  # paths whose value was dropped; validation errors there would repeat a problem


def parse_yaml(text: str, source: str, *, root: str = "", with_lines: bool = True) -> Parsed:
    """Parse one YAML document; `source` names it in messages, `root` prefixes every path (--set)."""
    if len(text) > MAX_BYTES:
        raise YamlFatal(Problem(source, root, f"more than {MAX_BYTES} characters: not a spec"))
    loader = SpecLoader(text)
    try:
        node = loader.get_single_node()
    except yaml.YAMLError as exc:
        raise YamlFatal(_syntax_problem(exc, text, source, root, with_lines)) from None
    finally:
        loader.dispose()
    walker = _Walker(loader, source, with_lines)
    data = None if node is None else walker.value(node, root)
    if data is _INVALID:
        data = None
    return Parsed(data, walker.smap, walker.problems, walker.bad_paths)


def _syntax_problem(exc: yaml.YAMLError, text: str, source: str, root: str, with_lines: bool) -> Problem:
    mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
    problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
    context = getattr(exc, "context", None)
    if mark is not None:
        line, detail = mark.line + 1, f"{problem} (column {mark.column + 1})"
    elif isinstance(exc, yaml.reader.ReaderError):
        line = text.count("\n", 0, exc.position) + 1
        detail = f"character {exc.character!r} is not allowed in YAML text"
    else:
        line, detail = 1, problem
    if context and "found" not in str(context):
        detail = f"{context}: {detail}"
    if "\\t" in detail or "\t" in detail:
        detail += "; indent with spaces, tabs are not allowed in YAML"
    where = f"{source}:{line}" if with_lines else source
    return Problem(where, root, f"invalid YAML: {detail}")


class _Walker:
    def __init__(self, loader: SpecLoader, source: str, with_lines: bool) -> None:
        self.loader = loader
        self.source = source
        self.with_lines = with_lines
        self.smap = SourceMap()
        self.problems: list[Problem] = []
        self.bad_paths: set[str] = set()
        self.count = 0
        self.active: set[int] = set()  # nodes on the current path: an alias back to one is a cycle
        self.flattened: set[int] = set()

    def loc(self, node: Node) -> Loc:
        return Loc(self.source, node.start_mark.line + 1 if self.with_lines else None)

    def report(self, node: Node, path: str, message: str) -> object:
        self.problems.append(Problem(str(self.loc(node)), path, message))
        self.bad_paths.add(path)
        return _INVALID

    def value(self, node: Node, path: str) -> Any:
        self.count += 1
        if self.count > MAX_NODES:
            raise YamlFatal(Problem(str(self.loc(node)), path, f"more than {MAX_NODES} values (alias bomb?)"))
        if node.tag not in ALLOWED_TAGS:
            return self.report(
                node,
                path,
                f"tag {short_tag(node.tag)!r} is not allowed: a spec is plain data "
                "(mappings, lists, strings, numbers, booleans, null)",
            )
        if id(node) in self.active:
            return self.report(node, path, "recursive alias: a value cannot contain itself")
        self.active.add(id(node))
        try:
            if isinstance(node, MappingNode):
                return self.mapping(node, path)
            if isinstance(node, SequenceNode):
                return self.sequence(node, path)
            return self.scalar(cast(ScalarNode, node), path)  # yaml composes only these three node kinds
        finally:
            self.active.discard(id(node))

    def mapping(self, node: MappingNode, path: str) -> Any:
        if id(node) not in self.flattened:  # an alias revisits the same node: check and merge it once
            self.flattened.add(id(node))
            seen: dict[str, int] = {}
            for key_node, _ in node.value:
                if isinstance(key_node, ScalarNode) and key_node.tag != f"{CORE}merge":
                    line = key_node.start_mark.line + 1
                    if key_node.value in seen:
                        first = f" (first at line {seen[key_node.value]})" if self.with_lines else ""
                        self.report(
                            key_node,
                            join(path, key_node.value),
                            f"duplicate key {key_node.value!r}{first}; the last one would win silently",
                        )
                        self.bad_paths.discard(join(path, key_node.value))
                    seen.setdefault(key_node.value, line)
            try:
                self.loader.flatten_mapping(node)  # `<<: *base` merge keys, as safe_load does
            except yaml.YAMLError as exc:
                return self.report(node, path, f"invalid merge key: {getattr(exc, 'problem', exc)}")
        result: dict[str, Any] = {}
        for key_node, value_node in node.value:
            if not isinstance(key_node, ScalarNode) or key_node.tag not in ALLOWED_TAGS:
                self.report(key_node, path, "keys must be plain names, not lists, mappings or tagged values")
                continue
            key = key_node.value  # the text as written: `1:` or `yes:` stay the names '1' and 'yes'
            child = join(path, key)
            self.smap.set(child, self.loc(key_node))
            value = self.value(value_node, child)
            if value is _INVALID:
                result.pop(key, None)
            else:
                result[key] = value
        return result

    def sequence(self, node: SequenceNode, path: str) -> list[Any]:
        items = []
        for i, item in enumerate(node.value):
            child = join(path, i)
            self.smap.set(child, self.loc(item))
            value = self.value(item, child)
            items.append(None if value is _INVALID else value)
        return items

    def scalar(self, node: ScalarNode, path: str) -> Any:
        if node.tag == f"{CORE}timestamp":
            return node.value
        try:
            value = self.loader.construct_object(node)
        except (yaml.YAMLError, ValueError, OverflowError) as exc:
            return self.report(node, path, f"cannot read {node.value!r}: {getattr(exc, 'problem', exc)}")
        if isinstance(value, int) and not isinstance(value, bool) and abs(value) >= INT_LIMIT:
            return self.report(node, path, f"found {_clip(node.value)}; the number is too large")
        if isinstance(value, float) and not math.isfinite(value):
            spelled = node.value.strip().lstrip("+-").lower()
            if spelled not in (".inf", ".nan"):
                return self.report(
                    node,
                    path,
                    f"found {_clip(node.value)}; the number is too large (it overflows to infinity)",
                )
        return value


def _clip(text: str, width: int = 40) -> str:
    return text if len(text) <= width else text[: width - 3] + "..."


def parse_value(text: str, where: str, path: str) -> tuple[Any, list[Problem]]:
    """A `--set` value, coerced as YAML would (`3` int, `1e-3` float, `true` bool, `[1, 2]` list)."""
    try:
        parsed = parse_yaml(text, where, root=path, with_lines=False)
    except YamlFatal as fatal:
        return _INVALID, [fatal.problem]
    return parsed.data, parsed.problems


def is_invalid(value: object) -> bool:
    return value is _INVALID


def format_problems(problems: Sequence[Problem]) -> list[str]:
    return [str(p) for p in problems]


# ---------------------------------------------------------------- output
class MaskText(str):
    """model.mask in dumps: `-inf` / `-1e9` written plain, as users write them (not quoted)."""


def _represent_mask(dumper: yaml.SafeDumper, value: MaskText) -> yaml.ScalarNode:
    tag = f"{CORE}str" if value == "-inf" else f"{CORE}float"
    return dumper.represent_scalar(tag, str(value))


def _represent_list(dumper: yaml.SafeDumper, value: list[Any]) -> yaml.SequenceNode:
    # [0.9, 0.98] on one line; lists of mappings (variants, objectives) as blocks
    flow = all(not isinstance(v, dict | list) for v in value)
    return dumper.represent_sequence(f"{CORE}seq", value, flow_style=flow)


SpecDumper.add_representer(MaskText, _represent_mask)
SpecDumper.add_representer(list, _represent_list)


def dump_yaml(data: dict[str, Any]) -> str:
    """Plain data as block YAML in key order, readable by `parse_yaml` (and `yaml.safe_load`)."""
    text: str = yaml.dump(
        data, Dumper=SpecDumper, sort_keys=False, default_flow_style=False, allow_unicode=True, width=100
    )  # a str because no stream is given
    return text
