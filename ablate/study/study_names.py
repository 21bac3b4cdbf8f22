"""Optuna study names people can read, with the identity kept as study attributes.

A study's identity is a hash of what its trials depend on (the baseline spec, and for a search its space
and objectives). Its Optuna study is named after the spec (``quick-axes``), the hash kept in the user attr
`KEY`; a second study of the same name with another identity (the spec edited, or run with ``--set``
overrides) is ``<name>-<hash[:8]>``. Stores written before readable names hold ``<legacy name>`` (the name
with the full hash): such a study is found and resumed under that name.

`study_attrs` also keeps the spec's name and the ``--set`` overrides, so that `ablate status` can name
the overrides of the studies a spec has in the store when the user forgets them.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import optuna
from optuna.study._frozen import FrozenStudy  # what storage.get_all_studies() returns (not re-exported)

from ablate.study.optuna_attrs import KEY, KIND, OVERRIDES, SPEC_NAME
from ablate.study.optuna_store import Store

__all__ = ["KEY", "KIND", "OVERRIDES", "SPEC_NAME"]


def _studies(store: Store) -> dict[str, FrozenStudy]:
    return {s.study_name: s for s in store.storage.get_all_studies()}


def resolve(store: Store, readable: str, key: str, legacy: str) -> str:
    """The Optuna study name for identity ``key``: the legacy name if the store has it (old stores
    resume), else ``readable`` when it is free or holds ``key`` (or no key yet), else
    ``readable-<key[:8]>``."""
    studies = _studies(store)
    if legacy in studies:
        return legacy
    for name in (readable, f"{readable}-{key[:8]}"):
        found = studies.get(name)
        # no identity recorded: an imported study (`ablate import` knows its name, not its key) or one whose
        # creator died before writing it; the opener records its key (write_attrs)
        if found is None or found.user_attrs.get(KEY) in (None, key):
            return name
    return legacy  # both readable forms taken by other identities: the unambiguous full name


def study_attrs(key: str, spec_name: str, overrides: Sequence[str], kind: str) -> dict[str, str]:
    return {KEY: key, SPEC_NAME: spec_name, OVERRIDES: json.dumps(list(overrides)), KIND: kind}


def write_attrs(study: optuna.Study, attrs: Mapping[str, str]) -> None:
    """Record the identity once (the first process to open the study writes it)."""
    if study.user_attrs.get(KEY) is None:
        for k, v in attrs.items():
            study.set_user_attr(k, v)


@dataclass
class Known:
    """A study of one spec name in a store."""

    name: str
    overrides: list[str] | None  # None: a study from before the overrides were recorded
    trials: int


def known_studies(store: Store, spec_name: str, kind: str) -> list[Known]:
    """The studies of ``spec_name`` (of one kind) in the store, oldest first: recorded ones by their
    attrs, legacy ones by their name (``<spec name>-<hash>``, ``<spec name>-search-<hash>``)."""
    out: list[Known] = []
    for s in store.storage.get_all_studies():
        attrs = s.user_attrs
        if attrs.get(SPEC_NAME) == spec_name and attrs.get(KIND, kind) == kind:
            out.append(Known(s.study_name, json.loads(attrs.get(OVERRIDES, "[]")), _count(store, s)))
        elif attrs.get(KEY) is None and _legacy_of(s.study_name, spec_name, kind):
            out.append(Known(s.study_name, None, _count(store, s)))
    return out


def _legacy_of(name: str, spec_name: str, kind: str) -> bool:
    prefix = f"{spec_name}-search-" if kind == "search" else f"{spec_name}-"
    rest = name[len(prefix):] if name.startswith(prefix) else ""
    return len(rest) >= 8 and all(c in "0123456789abcdef" for c in rest)


def _count(store: Store, summary: FrozenStudy) -> int:
    try:
        return int(store.storage.get_n_trials(store.storage.get_study_id_from_name(summary.study_name)))
    except Exception:  # noqa: BLE001 - a count is a courtesy
        return 0
