"""The registry of swappable Transformer components: the public component API.

A component is registered under a *kind* (an axis such as ``residual``) and a *name* (a variant such as
``pre_norm``). Specs name components by these keys, never by import path. Each kind is an :class:`Axis`
declared once (registry/axis.py says what a declaration holds), in the file of this package named after
it; a variant's own typed options are declared where it is registered. The model's axes are fields of the
spec's ``model:`` section; the training recipe's axes (``optimizer``, ``schedule``, ``loss``) each have a
section of their own (``train.optimizer.name``, ...) and are declared the same way. Third-party packages add
components, options and even axes through the entry-point group ``ablate.components``: each entry point
names a module whose import runs its ``declare_axis`` / ``@register`` calls. Plugins are imported on the
first lookup (``get``, ``names``, ``entries``, ``axes``, ``in``), so spec validation, the model builder and
``ablate list`` all see them; a plugin that fails to import or registers a taken name raises
:class:`RegistryError` naming the plugin.

This package imports torch and nothing of ``ablate``.
"""

from __future__ import annotations

import fnmatch
import importlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from importlib.metadata import entry_points
from typing import Any, TypeVar

from registry.aliases import did_you_mean
from registry.axis import MODEL, Axis, Option

T = TypeVar("T")
Check = Callable[[Mapping[str, Any]], "str | None"]

ENTRY_POINT_GROUP = "ablate.components"

__all__ = ["ENTRY_POINT_GROUP", "MODEL", "REGISTRY", "Axis", "Entry", "Option", "Registry", "RegistryError",
           "axes", "axis", "declare_axis", "get", "load_plugins", "model_axes", "names", "register"]


class RegistryError(LookupError):
    """A component name is unknown or registered twice, or a plugin failed to load (a user error)."""

    exit_code = 2


@dataclass(frozen=True)
class Entry:
    """A registered variant: its factory, its own options and the sub-axes it takes (``activation``)."""

    kind: str
    name: str
    obj: Any
    options: tuple[Option, ...] = ()
    takes: tuple[str, ...] = ()
    check: Check | None = None  # the model section -> a problem or None
    # The implementation version: raised when a fix changes what the variant computes (its init included).
    # Above 1 it enters the identity of the runs that choose this variant, and of no other run, so a fix
    # makes exactly this variant's old cells stale (ablate.spec.model.identity_of).
    version: int = 1

    @property
    def summary(self) -> str:
        """First paragraph of the component's docstring on one line: what `ablate list` prints."""
        doc = (getattr(self.obj, "__doc__", None) or "").strip()
        return " ".join(doc.split("\n\n")[0].split()) if doc else ""

    @property
    def doc(self) -> str:
        return (getattr(self.obj, "__doc__", None) or "").strip()


class Registry:
    """Maps (kind, name) to a component factory; a duplicate name is an error.

    With a ``plugin_group``, the modules its entry points name are imported before the first lookup.
    """

    def __init__(self, plugin_group: str | None = None) -> None:
        self._entries: dict[str, dict[str, Entry]] = {}
        self._axes: dict[str, Axis] = {}
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

    # ------------------------------------------------------------ declarations
    def declare_axis(self, axis: Axis) -> Axis:
        """Declare a kind (once); its variants are registered after it."""
        if axis.kind in self._axes:
            raise RegistryError(f"axis {axis.kind!r} is already declared")
        if axis.parent is not None and axis.parent not in self._axes:
            raise RegistryError(f"axis {axis.kind!r}: parent axis {axis.parent!r} is not declared")
        clash = {o.name for o in axis.options} & self._option_names()
        if clash or axis.kind in self._option_names():
            taken = sorted(clash or {axis.kind})
            raise RegistryError(f"axis {axis.kind!r}: option name(s) {taken} already taken")
        self._axes[axis.kind] = axis
        self._entries.setdefault(axis.kind, {})
        return axis

    def axes(self, section: str | None = None) -> list[Axis]:
        """Every declared axis, in declaration order (built-ins first, then plugins); with ``section``, only
        the axes of that spec section (``model``, ``train.optimizer``, ...)."""
        self.load_plugins()
        return [a for a in self._axes.values() if section is None or a.section == section]

    def sections(self) -> list[str]:
        """The spec sections that hold axes, ``model`` first, then the recipe's in declaration order."""
        self.load_plugins()
        return list(dict.fromkeys(a.section for a in self._axes.values()))

    def axis(self, kind: str) -> Axis:
        self.load_plugins()
        if kind not in self._axes:
            raise RegistryError(f"unknown component kind {kind!r}; known: {', '.join(self._axes)}")
        return self._axes[kind]

    def _option_names(self) -> set[str]:
        names = {o.name for a in self._axes.values() for o in a.options}
        entries = [e for bucket in self._entries.values() for e in bucket.values()]
        return names | {o.name for e in entries for o in e.options}

    def register(self, kind: str, name: str, *, options: tuple[Option, ...] = (),
                 takes: tuple[str, ...] = (), check: Check | None = None, version: int = 1
                 ) -> Callable[[T], T]:
        """Decorator: register ``obj`` as variant ``name`` of ``kind``, with its own ``options``, the
        sub-axes it ``takes`` (their components are passed to its constructor by keyword) and a ``check``
        of the model section the spec runs when the variant is chosen (``d_model`` must be even, ...) and
        its implementation ``version`` (raise it when a fix changes what the variant computes)."""

        def decorator(obj: T) -> T:
            self.add(kind, name, obj, options=options, takes=takes, check=check, version=version)
            return obj

        return decorator

    def add(self, kind: str, name: str, obj: Any, *, options: tuple[Option, ...] = (),
            takes: tuple[str, ...] = (), check: Check | None = None, version: int = 1) -> None:
        if kind not in self._axes:
            raise RegistryError(f"{kind} component {name!r}: no axis {kind!r} is declared (declare it first)")
        bucket = self._entries[kind]
        if name in bucket:
            raise RegistryError(
                f"{kind} component {name!r} is already registered "
                f"(by {getattr(bucket[name].obj, '__module__', '?')})"
            )
        for sub in takes:
            if sub not in self._axes or self._axes[sub].parent != kind:
                raise RegistryError(f"{kind} component {name!r} takes {sub!r}: not a sub-axis of {kind}")
        axis_names = {a.kind for a in self._axes.values()}
        for option in options:
            other = self._option(option.name)
            if option.name in axis_names or (other is not None and other != option):
                raise RegistryError(
                    f"{kind} component {name!r}: option {option.name!r} is already declared differently"
                )
        if not isinstance(version, int) or isinstance(version, bool) or version < 1:
            raise RegistryError(f"{kind} component {name!r}: version must be an integer >= 1, "
                                f"not {version!r}")
        bucket[name] = Entry(kind, name, obj, tuple(options), tuple(takes), check, version)

    def _option(self, name: str) -> Option | None:
        for axis in self._axes.values():
            for option in axis.options:
                if option.name == name:
                    return option
        for bucket in self._entries.values():
            for entry in bucket.values():
                for option in entry.options:
                    if option.name == name:
                        return option
        return None

    def get(self, kind: str, name: str) -> Any:
        return self.entry(kind, name).obj

    def entry(self, kind: str, name: str) -> Entry:
        self.load_plugins()
        bucket = self._entries.get(kind)
        if bucket is None:
            raise RegistryError(f"unknown component kind {kind!r}; known: {', '.join(self.kinds())}")
        if name not in bucket:
            hint = did_you_mean(kind, name, list(bucket))
            raise RegistryError(f"unknown {kind} {name!r}; known: {', '.join(sorted(bucket))}{hint}")
        return bucket[name]

    def names(self, kind: str, pattern: str = "*") -> list[str]:
        """Names of `kind` matching the shell-style `pattern` ('c*', '-1e?'), sorted."""
        self.load_plugins()
        return sorted(n for n in self._entries.get(kind, {}) if fnmatch.fnmatchcase(n, pattern))

    def kinds(self) -> list[str]:
        """Declared kinds, in declaration order."""
        self.load_plugins()
        return list(self._entries)

    def entries(self, kind: str | None = None, pattern: str = "*") -> list[Entry]:
        kinds = [kind] if kind else self.kinds()
        return [self._entries[k][n] for k in kinds if k in self._entries for n in self.names(k, pattern)]

    def __contains__(self, key: tuple[str, str]) -> bool:
        kind, name = key
        self.load_plugins()
        return name in self._entries.get(kind, {})


REGISTRY = Registry()
register = REGISTRY.register
declare_axis = REGISTRY.declare_axis
axes = REGISTRY.axes
axis = REGISTRY.axis


def model_axes() -> list[Axis]:
    """The axes of the spec's ``model:`` section (the recipe's optimizer, schedule and loss excluded)."""
    return REGISTRY.axes(MODEL)


get = REGISTRY.get
names = REGISTRY.names
load_plugins = REGISTRY.load_plugins  # lookups call it; explicit calls (tests, `ablate list`) are harmless

# One file per axis, in the order `ablate list`, the spec and the schema show them: the model's axes, then
# the training recipe's (their own spec sections: train.optimizer, train.schedule, train.loss).
_BUILTIN_MODULES = (
    "residual", "positions", "ffn", "activation", "norm", "masking", "attention", "embeddings",
    "embedding_dropout", "parametrisation", "logits", "optimizer", "schedule", "loss",
)

for _module in _BUILTIN_MODULES:
    importlib.import_module(f"{__name__}.{_module}")
REGISTRY.use_plugins(ENTRY_POINT_GROUP)  # after the built-ins: a plugin cannot take their names first
