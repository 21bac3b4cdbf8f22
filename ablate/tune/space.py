"""Derived specs: an ablation cell or a search trial is the baseline spec with dotted fields overridden.

No Optuna here (ablate/tune.py drives the sampler): this module orders the search dimensions by their
`when` conditions, checks every dimension's values against the baseline up front (a bad range is a spec
error before anything trains), and turns sampled values back into a validated `ExperimentSpec`.

    search:
      space:
        train.optimizer.lr: {low: 1e-4, high: 3e-3, log: true}
        model.residual: {choice: [pre_norm, post_norm]}
        train.schedule.warmup_steps: {low: 0, high: 800, int: true, when: {train.schedule.name: inverse_sqrt}}
"""

from __future__ import annotations

import copy
import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ablate.errors import AblateError
from ablate.spec import ExperimentSpec, SearchParam, flatten
from ablate.specerrors import check_field_path
from ablate.specload import SpecError, load_spec, load_spec_data, set_dotted, validate_data
from ablate.yamlsrc import Loc, Problem, SourceMap

TEXT_ONLY = ("bleu", "chrf")  # metrics a synthetic task does not produce (it reports exact_match)


def derive(data: Mapping[str, Any], smap: SourceMap, overrides: Mapping[str, Any], origin: str,
           seed: int | None = None) -> ExperimentSpec:
    """The baseline's raw data with `overrides` (dotted field -> value) applied, validated; the study
    sections are dropped (a cell or trial is a plain experiment). Problems point at `origin`."""
    cell = copy.deepcopy(dict(data))
    cell.pop("ablation", None)
    cell.pop("search", None)
    where = smap.copy()
    for key, value in overrides.items():
        try:
            set_dotted(cell, key, copy.deepcopy(value))
        except KeyError as exc:
            raise SpecError([Problem(origin, key, f"cannot set it: {exc.args[0]}")]) from None
        where.drop_under(key)
        where.set(key, Loc(origin))
    if seed is not None:
        cell["seed"] = seed
    return validate_data(cell, where, origin)


def show(value: Any) -> str:
    """A value as a YAML user writes it: post_norm, 0.001, true, [0.9, 0.98]."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        text = f"{value:g}"
        if "e" in text:  # -1e+09 -> -1e9, as written in YAML and in model.mask
            mantissa, exponent = text.split("e")
            text = f"{mantissa}e{int(exponent)}"
        return text
    if isinstance(value, str | int) or value is None:
        return str(value)
    return json.dumps(value, separators=(", ", ": "))


def _primitive(values: Sequence[Any]) -> bool:
    return all(v is None or isinstance(v, str | int | float | bool) for v in values)


@dataclass
class SearchPlan:
    spec: ExperimentSpec  # the baseline
    data: dict[str, Any]
    smap: SourceMap
    origin: str
    order: list[str]  # dimensions, each after those its `when` refers to

    @property
    def space(self) -> dict[str, SearchParam]:
        assert self.spec.search is not None
        return self.spec.search.space

    @property
    def metrics(self) -> list[str]:
        assert self.spec.search is not None
        return [o.metric for o in self.spec.search.objectives]

    @property
    def directions(self) -> list[str]:
        assert self.spec.search is not None
        return [o.direction for o in self.spec.search.objectives]

    def baseline_value(self, field: str) -> Any:
        return flatten(self.spec.resolved()).get(field)

    def active(self, name: str, values: Mapping[str, Any]) -> bool:
        """Whether a dimension is sampled, given the values chosen so far (else the baseline's)."""
        for field, allowed in (self.space[name].when or {}).items():
            current = values[field] if field in values else self.baseline_value(field)
            options = allowed if isinstance(allowed, list) else [allowed]
            if not any(current == a or show(current) == show(a) for a in options):
                return False
        return True

    def encoded(self, name: str) -> bool:
        """Choices Optuna cannot store as they are (lists, mappings) travel as JSON strings."""
        choice = self.space[name].choice
        return choice is not None and not _primitive(choice)

    def decode(self, name: str, value: Any) -> Any:
        return json.loads(value) if self.encoded(name) and isinstance(value, str) else value

    def grid(self, name: str) -> list[Any]:
        p = self.space[name]
        if p.choice is not None:
            return [json.dumps(c, sort_keys=True) for c in p.choice] if self.encoded(name) else list(p.choice)
        assert p.low is not None and p.high is not None
        step = p.step or 1
        count = int(math.floor((p.high - p.low) / step + 1e-9)) + 1
        values = [p.low + i * step for i in range(count)]
        return [int(round(v)) for v in values] if p.int else [round(v, 12) for v in values]

    def spec_for(self, values: Mapping[str, Any], origin: str) -> ExperimentSpec:
        return derive(self.data, self.smap, {k: self.decode(k, v) for k, v in values.items()}, origin)

    def baseline_params(self) -> dict[str, Any]:
        """The baseline's own values of the active dimensions, where the space contains them."""
        out: dict[str, Any] = {}
        for name in self.order:
            if not self.active(name, out):
                continue
            value, p = self.baseline_value(name), self.space[name]
            if p.choice is not None:
                matches = [c for c in p.choice if c == value or show(c) == show(value)]
                if not matches:
                    continue
                value = json.dumps(matches[0], sort_keys=True) if self.encoded(name) else matches[0]
            elif not isinstance(value, int | float) or not (p.low <= value <= p.high):  # type: ignore[operator]
                continue
            out[name] = value
        return out


def plan_search(spec_path: str, overrides: Sequence[str] = ()) -> SearchPlan:
    """Load the spec and check its search section; raises SpecError naming the dimension at fault."""
    spec = load_spec(spec_path, overrides)
    if spec.search is None:
        raise AblateError(f"{spec_path} has no search section: nothing to tune")
    data, smap = load_spec_data(spec_path, overrides)
    origin = str(spec_path)
    problems: list[Problem] = []
    space = spec.search.space

    def where(name: str) -> str:
        return smap.where(f"search.space.{name}", origin)

    for name, p in space.items():
        for field in p.when or {}:
            error = check_field_path(field)
            if error:
                problems.append(Problem(where(name), f"search.space.{name}.when", error))
        if p.int and p.step is not None and p.step != int(p.step):
            problems.append(Problem(where(name), f"search.space.{name}", "an int dimension needs an int "
                                                                          "step"))
        base = flatten(spec.resolved()).get(name)
        if p.choice is None and not p.int and isinstance(base, int) and not isinstance(base, bool):
            problems.append(Problem(where(name), f"search.space.{name}",
                                    f"{name} is an integer field: add `int: true` to sample integers"))
        if p.log and p.step is not None:
            problems.append(Problem(where(name), f"search.space.{name}", "log and step exclude each other"))
    if spec.data.source == "synthetic":
        for i, obj in enumerate(spec.search.objectives):
            if any(t in obj.metric for t in TEXT_ONLY):
                at = f"search.objectives.{i}"
                problems.append(Problem(smap.where(at, origin), at,
                                        f"{obj.metric} needs text data; a synthetic task reports "
                                        "val/exact_match and val/loss"))
    order = _order(space, where, problems)
    plan = SearchPlan(spec, data, smap, origin, order)
    if not problems:
        problems.extend(_probe(plan, where))
    if problems:
        raise SpecError(problems)
    return plan


def _order(space: Mapping[str, SearchParam], where: Any, problems: list[Problem]) -> list[str]:
    """Dimensions after the ones their `when` names (Kahn's algorithm); a cycle is an error."""
    deps = {n: [f for f in (p.when or {}) if f in space and f != n] for n, p in space.items()}
    order: list[str] = []
    while len(order) < len(space):
        ready = [n for n in space if n not in order and all(d in order for d in deps[n])]
        if not ready:
            stuck = [n for n in space if n not in order]
            problems.append(Problem(where(stuck[0]), f"search.space.{stuck[0]}.when",
                                    f"the `when` conditions form a cycle: {', '.join(stuck)}"))
            return order + stuck
        order.extend(ready)
    return order


def _probe(plan: SearchPlan, where: Any) -> list[Problem]:
    """Validate the baseline with each choice (or each range end) of every dimension, conditions met."""
    problems: list[Problem] = []
    for name, p in plan.space.items():
        values = list(p.choice) if p.choice is not None else [p.low, p.high]
        if p.int and p.choice is None:
            values = [int(v) for v in values]  # type: ignore[arg-type]
        condition = {f: (a[0] if isinstance(a, list) and a else a) for f, a in (p.when or {}).items()}
        for value in values:
            try:
                derive(plan.data, plan.smap, {**condition, name: value}, where(name))
            except SpecError as exc:
                for sub in exc.problems:
                    problems.append(Problem(where(name), f"search.space.{name}",
                                            f"{name}={show(value)} gives an invalid spec: "
                                            f"{sub.path}: {sub.message}"))
    return problems
