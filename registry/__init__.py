"""The registry of swappable Transformer components.

A component is registered under a *kind* (an axis such as ``residual``) and a
*name* (a variant such as ``pre_norm``). Specs name components by these keys,
never by import path. Third-party packages add components through the
entry-point group ``ablate.components``: each entry point names a module whose
import runs its ``@register`` decorators. Plugins are imported on the first
lookup (``get``, ``names``, ``entries``, ``in``), so spec validation, the model
builder and ``ablate list`` all see them; a plugin that fails to import or
registers a taken name raises :class:`RegistryError` naming the plugin.
"""

from __future__ import annotations

import difflib
import fnmatch
import importlib
from collections.abc import Callable
from dataclasses import dataclass
from importlib.metadata import entry_points
from typing import Any, TypeVar

T = TypeVar("T")

ENTRY_POINT_GROUP = "ablate.components"

# The axes the model builder knows how to use. A plugin may add new names to
# these kinds; a new kind needs a builder that consumes it.
KINDS: tuple[str, ...] = ("residual", "positions", "ffn", "norm", "mask", "attention")


class RegistryError(LookupError):
    """A component name is unknown or registered twice, or a plugin failed to load (a user error)."""

    exit_code = 2


@dataclass(frozen=True)
class Entry:
    kind: str
    name: str
    obj: Any

    @property
    def summary(self) -> str:
        """First line of the component's docstring: what `ablate list` prints."""
        doc = (getattr(self.obj, "__doc__", None) or "").strip()
        return doc.splitlines()[0] if doc else ""

    @property
    def doc(self) -> str:
        return (getattr(self.obj, "__doc__", None) or "").strip()


class Registry:
    """Maps (kind, name) to a component factory; a duplicate name is an error.

    With a ``plugin_group``, the modules its entry points name are imported before the first lookup.
    """

    def __init__(self, plugin_group: str | None = None) -> None:
        self._entries: dict[str, dict[str, Entry]] = {}
        self._plugin_group: str | None = None
        self._plugins_loaded = True
        self._plugin_errors: list[str] = []
        if plugin_group is not None:
            self.use_plugins(plugin_group)

    def use_plugins(self, group: str) -> None:
        """Load the entry points of `group` before the next lookup."""
        self._plugin_group, self._plugins_loaded = group, False

    def load_plugins(self) -> None:
        """Import every entry point of the plugin group (once); raise RegistryError if one failed."""
        if not self._plugins_loaded and self._plugin_group is not None:
            self._plugins_loaded = True  # before importing: a plugin may look names up while it registers
            for ep in sorted(entry_points(group=self._plugin_group), key=lambda e: e.name):
                try:
                    ep.load()
                except Exception as exc:  # noqa: BLE001 - any import failure is the plugin's, said in one line
                    dist = f" from {ep.dist.name}" if ep.dist is not None else ""
                    detail = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
                    what = detail if isinstance(exc, RegistryError) else f"{type(exc).__name__}: {detail}"
                    self._plugin_errors.append(
                        f"plugin {ep.name!r} ({ep.value}{dist}, entry point group {ep.group}) failed: {what}"
                    )
        if self._plugin_errors:  # every later lookup too: a half-loaded registry must not pass silently
            raise RegistryError("\n".join(self._plugin_errors))

    def register(self, kind: str, name: str) -> Callable[[T], T]:
        def decorator(obj: T) -> T:
            self.add(kind, name, obj)
            return obj

        return decorator

    def add(self, kind: str, name: str, obj: Any) -> None:
        bucket = self._entries.setdefault(kind, {})
        if name in bucket:
            raise RegistryError(
                f"{kind} component {name!r} is already registered "
                f"(by {getattr(bucket[name].obj, '__module__', '?')})"
            )
        bucket[name] = Entry(kind, name, obj)

    def get(self, kind: str, name: str) -> Any:
        return self.entry(kind, name).obj

    def entry(self, kind: str, name: str) -> Entry:
        self.load_plugins()
        bucket = self._entries.get(kind)
        if bucket is None:
            raise RegistryError(f"unknown component kind {kind!r}; known: {', '.join(self.kinds())}")
        if name not in bucket:
            close = difflib.get_close_matches(name, list(bucket), n=1)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            raise RegistryError(f"unknown {kind} {name!r}; known: {', '.join(sorted(bucket))}{hint}")
        return bucket[name]

    def names(self, kind: str, pattern: str = "*") -> list[str]:
        """Names of `kind` matching the shell-style `pattern` ('c*', '-1e?'), sorted."""
        self.load_plugins()
        return sorted(n for n in self._entries.get(kind, {}) if fnmatch.fnmatchcase(n, pattern))

    def kinds(self) -> list[str]:
        self.load_plugins()
        return sorted(self._entries)

    def entries(self, kind: str | None = None, pattern: str = "*") -> list[Entry]:
        kinds = [kind] if kind else self.kinds()
        return [self._entries[k][n] for k in kinds if k in self._entries for n in self.names(k, pattern)]

    def __contains__(self, key: tuple[str, str]) -> bool:
        kind, name = key
        self.load_plugins()
        return name in self._entries.get(kind, {})


REGISTRY = Registry()
register = REGISTRY.register
get = REGISTRY.get
names = REGISTRY.names
load_plugins = REGISTRY.load_plugins  # lookups call it; explicit calls (tests, `ablate list`) are harmless

_BUILTIN_MODULES = ("residual", "positions", "ffn", "norm", "masking", "attention")

for _module in _BUILTIN_MODULES:
    importlib.import_module(f"{__name__}.{_module}")
REGISTRY.use_plugins(ENTRY_POINT_GROUP)  # after the built-ins: a plugin cannot take their names first
