"""A ladder's rungs (``ablation.scales``): each rung's overrides of the spec, with its steps set from its
tokens or the tokens-from-parameters rule, and its planned training compute; every problem located.

    ablation:
      scales:
        rungs:                         # name -> overrides (dotted or nested), optionally tokens: N
          xs: {model.d_model: 32, model.d_ff: 128, model.heads: 2}
          s:  {model.d_model: 64, model.d_ff: 256}
          m:  {model.d_model: 128, model.d_ff: 512, model.decoder_layers: 4}
        tokens_per_param: 20           # tokens = 20 x the baseline's parameters without embeddings
        target: 1e15                   # FLOPs the transfer verdict predicts each gap at

A rung scales the model; a variant changes one design choice. A rung may therefore not set a field a
variant sets (the comparison would change with the rung). The tokens a rung trains on are its own
``tokens``, else ``tokens_per_param`` times the baseline's parameters without embeddings at the rung
(ablate/engine/compute.py counts them on a model built without data: embeddings are left out, so the
vocabulary does not matter), else its ``train.max_steps``; ``train.max_steps`` follows from
``data.batch_tokens`` (a language model's step is ``batch_tokens // max_len`` full blocks). Every variant
at a rung trains the same tokens, so their cells see the same batches in the same order.

Imports nothing of the study's plan (ablate/study/study_plan.py imports it); the rung sub-plans the rounds
walk are ablate/study/rung_rounds.py's.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ablate.engine.compute import Compute, Shape, planned_compute, shape_of
from ablate.engine.dispatch import build_any
from ablate.spec.experiment import ExperimentSpec, flatten
from ablate.spec.load import SpecError
from ablate.spec.study_sections import DATA_BUDGET_SEP, RUNG_TOKENS, ScalesSpec
from ablate.spec.yamlsrc import Problem, SourceMap
from ablate.study.derived_specs import derive, show

SCALES = "ablation.scales"
_PROBE_VOCAB = 8  # the model is built only to count its stacks' parameters: any vocabulary will do


@dataclass(frozen=True)
class Rung:
    """One rung: what it sets on the spec (steps included), and the baseline's planned compute there."""

    name: str
    overrides: dict[str, Any]  # dotted fields over the spec, train.max_steps set from tokens or the rule
    compute: Compute  # the baseline's, before it runs (ablate/engine/compute.py planned_compute)
    tokens_from: str  # 'tokens', 'tokens_per_param' or 'train.max_steps': where its budget came from
    size: str = ""  # the size rung it trains (its own name but for a data budget's rung: m for m-2x)
    budget: float | None = None  # scales.budgets: the multiple of the size rung's tokens (None: no budgets)
    params_all: int | None = None  # every parameter, embeddings and output head included (when counted)

    def describe(self) -> str:
        shown = ", ".join(f"{k}={show(v)}" for k, v in self.overrides.items())
        every = f" ({self.params_all:,} in all)" if self.params_all is not None else ""
        return (f"{self.name}: {shown}; N {self.compute.params:,} parameters without embeddings{every}, "
                f"{self.compute.tokens:,} tokens ({self.tokens_from}), {self.compute.flops:.3g} FLOPs")

    @property
    def size_rung(self) -> str:
        return self.size or self.name


def tokens_per_step(spec: ExperimentSpec) -> int:
    """The tokens one optimizer step trains on: full blocks for a language model, at most batch_tokens for
    a translation model."""
    if spec.is_lm:
        blocks = max(1, spec.data.batch_tokens // spec.data.max_len)  # full blocks of data.max_len
        return blocks * spec.data.max_len * spec.train.accumulation
    return spec.data.batch_tokens * spec.train.accumulation


def model_shape(spec: ExperimentSpec) -> Shape:
    """The stacks of the spec's model, built without data (the vocabulary is left out of N)."""
    model = build_any(spec.model, _PROBE_VOCAB, _PROBE_VOCAB, pad_id=0, seed=spec.seed)
    return shape_of(model)


def planned(spec: ExperimentSpec) -> Compute:
    """A cell's compute before it runs (an upper bound for a translation model)."""
    steps = spec.train.max_steps or 0
    shape = model_shape(spec)
    return planned_compute(shape, steps, tokens_per_step(spec), spec.data.max_len)


def all_params(spec: ExperimentSpec) -> int:
    """Every parameter of the spec's model at its tokenizer's vocabulary (embeddings and output head too)."""
    vocab = spec.data.tokenizer.vocab_size
    model = build_any(spec.model, vocab, vocab, pad_id=0, seed=spec.seed)
    return sum(p.numel() for p in model.parameters())


def expand(scales: ScalesSpec, data: Mapping[str, object], smap: SourceMap, origin: str,
           variants: Sequence[tuple[str, Mapping[str, object]]]) -> tuple[list[Rung], list[Problem]]:
    """The rungs in order of planned compute, and every problem with them (``variants``: (label, overrides)
    of the study's variants, the baseline's included); with ``scales.budgets`` each size's budgets are
    rungs of their own, in order of compute too."""
    rungs: list[Rung] = []
    problems: list[Problem] = []
    for name, written in scales.rungs.items():
        at = f"{SCALES}.rungs.{name}"
        where = smap.where(at, origin)
        overrides = flatten({k: v for k, v in written.items() if k != RUNG_TOKENS})
        clash = [(label, key) for label, ov in variants for key in ov
                 if any(key == k or key.startswith(k + ".") or k.startswith(key + ".") for k in overrides)]
        if clash:
            label, key = clash[0]
            problems.append(Problem(where, at, f"rung {name!r} sets {key}, which variant {label} changes: a "
                                    "rung scales the model, a variant changes one choice at every rung"))
            continue
        try:
            rung = _rung(scales, name, written, overrides, data, smap, where)
        except SpecError as exc:
            problems.extend(Problem(where, at, f"rung {name!r} gives an invalid spec: {p.path}: {p.message}")
                            for p in exc.problems)
            continue
        if isinstance(rung, str):
            problems.append(Problem(where, at, rung))
            continue
        rungs += _budgets(scales, rung, data, smap, where) if scales.budgets else [rung]
    rungs.sort(key=lambda r: r.compute.flops)
    problems += _ladder_problems(scales, rungs, data, smap, origin)
    return rungs, problems


def _rung(scales: ScalesSpec, name: str, written: Mapping[str, Any], overrides: dict[str, object],
          data: Mapping[str, object], smap: SourceMap, where: str) -> Rung | str:
    """One rung with its steps set (or why it cannot have any)."""
    spec = derive(data, smap, overrides, where)
    per_step = tokens_per_step(spec)
    shape = model_shape(spec)
    tokens = written.get(RUNG_TOKENS)
    source = RUNG_TOKENS
    every = all_params(spec) if scales.tokens_counted == "all" else None
    if tokens is None and scales.tokens_per_param is not None and "train.max_steps" not in overrides:
        counted = every if every is not None else shape.non_embedding
        tokens, source = scales.tokens_per_param * counted, "tokens_per_param"
    if tokens is not None:
        overrides = {**overrides, "train.max_steps": max(1, round(float(tokens) / per_step))}
        spec = derive(data, smap, overrides, where)
    elif spec.train.max_steps is None:
        return (f"rung {name!r} has no step budget: give it train.max_steps or tokens, or set "
                f"{SCALES}.tokens_per_param")
    else:
        source = "train.max_steps"
    steps = spec.train.max_steps
    assert steps is not None
    return Rung(name, overrides, planned_compute(shape, steps, per_step, spec.data.max_len), source,
                params_all=every)


def _budgets(scales: ScalesSpec, rung: Rung, data: Mapping[str, object], smap: SourceMap, where: str
             ) -> list[Rung]:
    """A size rung's data budgets (``scales.budgets``), each a rung ``<name>-<multiple>x`` with the
    multiple of its tokens and train.max_steps to match: each budget's cells run their own whole schedule
    (warm-up, decay, evaluation at the end), never a checkpoint on the way of a longer run."""
    assert scales.budgets is not None
    out = []
    spec = derive(data, smap, rung.overrides, where)
    per_step = tokens_per_step(spec)
    shape = model_shape(spec)
    for multiple in scales.budgets:
        steps = max(1, round(rung.compute.tokens * multiple / per_step))
        overrides = {**rung.overrides, "train.max_steps": steps}
        name = f"{rung.name}{DATA_BUDGET_SEP}{multiple:g}x"
        out.append(dataclasses.replace(
            rung, name=name, overrides=overrides, size=rung.name, budget=float(multiple),
            compute=planned_compute(shape, steps, per_step, spec.data.max_len)))
    return out


def _ladder_problems(scales: ScalesSpec, rungs: list[Rung], data: Mapping[str, object], smap: SourceMap,
                     origin: str) -> list[Problem]:
    """Rungs that are one size twice, and a target that is not beyond the largest rung."""
    problems: list[Problem] = []
    seen: dict[str, str] = {}
    for rung in rungs:
        key = derive(data, smap, rung.overrides, origin).spec_hash
        if key in seen:
            at = f"{SCALES}.rungs.{rung.name}"
            problems.append(Problem(smap.where(at, origin), at, f"rung {rung.name!r} gives the same cells as "
                                    f"rung {seen[key]!r}: every rung is a size of its own"))
        seen.setdefault(key, rung.name)
    if scales.target is not None and rungs and not problems:
        top = rungs[-1]
        if scales.target <= top.compute.flops:
            at = f"{SCALES}.target"
            problems.append(Problem(smap.where(at, origin), at,
                                    f"target {scales.target:.3g} FLOPs is not above the largest rung "
                                    f"({top.name}, {top.compute.flops:.3g} FLOPs planned): the target is "
                                    "where the fitted gap is extrapolated to"))
    return problems
