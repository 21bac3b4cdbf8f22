"""The registry of swappable Transformer components.

A component is registered under a *kind* (an axis such as ``residual``) and a
*name* (a variant such as ``pre_norm``). Specs name components by these keys,
never by import path. Third-party packages add components through the
entry-point group ``ablate.components``: each entry point names a module whose
import runs its ``@register`` decorators.
"""

from __future__ import annotations

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
    """A component name is unknown or registered twice."""


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
    """Maps (kind, name) to a component factory; a duplicate name is an error."""

    def __init__(self) -> None:
        self._entries: dict[str, dict[str, Entry]] = {}

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
        bucket = self._entries.get(kind)
        if bucket is None:
            raise RegistryError(f"unknown component kind {kind!r}; known: {', '.join(self.kinds())}")
        if name not in bucket:
            raise RegistryError(f"unknown {kind} {name!r}; known: {', '.join(sorted(bucket))}")
        return bucket[name]

    def names(self, kind: str, pattern: str = "*") -> list[str]:
        return sorted(n for n in self._entries.get(kind, {}) if fnmatch.fnmatchcase(n, pattern))

    def kinds(self) -> list[str]:
        return sorted(self._entries)

    def entries(self, kind: str | None = None, pattern: str = "*") -> list[Entry]:
        kinds = [kind] if kind else self.kinds()
        return [self._entries[k][n] for k in kinds if k in self._entries for n in self.names(k, pattern)]

    def __contains__(self, key: tuple[str, str]) -> bool:
        kind, name = key
        return name in self._entries.get(kind, {})


REGISTRY = Registry()
register = REGISTRY.register
get = REGISTRY.get
names = REGISTRY.names

_BUILTIN_MODULES = ("residual", "positions", "ffn", "norm", "masking", "attention")
_plugins_loaded = False


def load_plugins() -> None:
    """Import third-party component modules named by the ``ablate.components`` entry points (once)."""
    global _plugins_loaded
    if _plugins_loaded:
        return
    _plugins_loaded = True
    for ep in entry_points(group=ENTRY_POINT_GROUP):
        ep.load()


for _module in _BUILTIN_MODULES:
    importlib.import_module(f"{__name__}.{_module}")
