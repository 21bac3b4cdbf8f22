"""Derived specs: an ablation cell or a search trial is the baseline spec with dotted fields overridden.

No Optuna here (ablate/study/search.py drives the sampler): this module orders the search dimensions by their
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
import itertools
import json
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ablate.errors import AblateError
from ablate.spec.error_lines import check_field_path
from ablate.spec.experiment import ExperimentSpec, SearchParam, SearchSpec, flatten
from ablate.spec.load import SpecError, load_spec, load_spec_data, set_dotted, validate_data
from ablate.spec.yamlsrc import Loc, Problem, SourceMap


def derive(data: Mapping[str, object], smap: SourceMap, overrides: Mapping[str, object], origin: str,
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


def show(value: object) -> str:
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


def _primitive(values: Sequence[object]) -> bool:
    return all(v is None or isinstance(v, str | int | float | bool) for v in values)


@dataclass
class SearchPlan:
    spec: ExperimentSpec  # the baseline
    data: dict[str, Any]
    smap: SourceMap
    origin: str
    order: list[str]  # dimensions, each after those its `when` refers to
    # what train.precision: auto trains at: an ablation's searches take their study's (study/precision.py);
    # not part of the search's identity
    precision: str | None = None

    @property
    def search(self) -> SearchSpec:
        """The spec's search section (a search plan always has one)."""
        assert self.spec.search is not None
        return self.spec.search

    @property
    def space(self) -> dict[str, SearchParam]:
        return self.search.space

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

    def active(self, name: str, values: Mapping[str, object]) -> bool:
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

    def decode(self, name: str, value: object) -> Any:
        return json.loads(value) if self.encoded(name) and isinstance(value, str) else value

    def grid(self, name: str) -> list[object]:
        p = self.space[name]
        if p.choice is not None:
            return [json.dumps(c, sort_keys=True) for c in p.choice] if self.encoded(name) else list(p.choice)
        assert p.low is not None and p.high is not None
        step = p.step or 1
        count = int(math.floor((p.high - p.low) / step + 1e-9)) + 1
        values = [p.low + i * step for i in range(count)]
        return [int(round(v)) for v in values] if p.int else [round(v, 12) for v in values]

    def spec_for(self, values: Mapping[str, object], origin: str) -> ExperimentSpec:
        return derive(self.data, self.smap, {k: self.decode(k, v) for k, v in values.items()}, origin)

    def baseline_point(self) -> tuple[dict[str, object] | None, list[str]]:
        """(params, notes): the baseline's own values of the active dimensions as the sampler stores them,
        the first trial. A value outside its range (or off its step) is kept: Optuna runs an enqueued value
        it would not sample (with a warning), and a note says so. Params are None when a dimension cannot
        hold the baseline's value at all (a choice list without it, a log range and a value <= 0): the
        notes then name the dimension, and the search has no baseline trial."""
        out: dict[str, Any] = {}
        notes: list[str] = []
        for name in self.order:
            if not self.active(name, {k: self.decode(k, v) for k, v in out.items()}):
                continue
            value, p = self.baseline_value(name), self.space[name]
            at = f"search.space.{name}"
            if p.choice is not None:
                matches = [c for c in p.choice if c == value or show(c) == show(value)]
                if not matches:
                    return None, [f"{at} has no choice {show(value)} (the baseline's): the first trial is "
                                  "not the baseline; add the value to the choices to compare against it"]
                out[name] = json.dumps(matches[0], sort_keys=True) if self.encoded(name) else matches[0]
                continue
            assert p.low is not None and p.high is not None
            number = isinstance(value, int | float) and not isinstance(value, bool)
            if not number or (p.int and value != int(value)) or (p.log and value <= 0):
                why = "is not a positive number (a log range)" if p.log and number else "does not fit it"
                return None, [f"{at}: the baseline's {show(value)} {why}: the first trial is not the "
                              "baseline"]
            value = int(value) if p.int else float(value)
            on_step = p.step is None or abs((value - p.low) / p.step - round((value - p.low) / p.step)) < 1e-9
            if not (p.low <= value <= p.high) or not on_step:
                notes.append(f"{at}: the baseline's {show(value)} is outside "
                             f"[{show(p.low)}, {show(p.high)}{f', step {show(p.step)}' if p.step else ''}]: "
                             "the first trial runs it all the same")
            out[name] = value
        return out, notes

    def grid_points(self) -> list[dict[str, object]]:
        """Every distinct point of the grid over the dimensions active at it, in product order: a conditional
        dimension that is off there adds no copies of the point."""
        points: dict[str, dict[str, Any]] = {}
        for combo in itertools.product(*(self.grid(n) for n in self.order)):
            full = dict(zip(self.order, combo, strict=True))
            point: dict[str, Any] = {}
            for name in self.order:
                if self.active(name, {k: self.decode(k, v) for k, v in point.items()}):
                    point[name] = full[name]
            points.setdefault(point_key(point), point)
        return list(points.values())


def point_key(params: Mapping[str, object]) -> str:
    """A search point's identity: the sampler-side values of its dimensions."""
    return json.dumps(dict(params), sort_keys=True)


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
    order = _order(space, where, problems)
    plan = SearchPlan(spec, data, smap, origin, order)
    if not problems:
        problems.extend(_probe(plan, where))
    if problems:
        raise SpecError(problems)
    return plan


def _order(space: Mapping[str, SearchParam], where: Callable[[str], str], problems: list[Problem]
           ) -> list[str]:
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


def _probe(plan: SearchPlan, where: Callable[[str], str]) -> list[Problem]:
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
