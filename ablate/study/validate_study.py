"""`ablate validate`: each spec, the data files it names and, for a study, its design expanded exactly as
`ablate study --dry-run` expands it (``designs.plan_study``: every variant, named level and rung a spec of
its own), so that a spec `validate` passes is one the dry run plans. Every problem of a spec in one pass,
each one located line (exit 2); beside each ok, what the data check noticed (a tokenizer file's one
end-of-text token serving as pad and bos; a vocabulary far larger than the model's width). Reads files,
writes nothing: a ``seeds.max: auto`` is left to the dry run (it reads the pilot), the design expanded at
``seeds.min``."""

from __future__ import annotations

from collections.abc import Sequence

from ablate.data.check import check_data, data_notes
from ablate.spec.commands import validate_specs
from ablate.spec.experiment import ExperimentSpec
from ablate.spec.yamlsrc import Problem, SpecError
from ablate.study.designs import plan_study


def check_study(path: str, overrides: Sequence[str], spec: ExperimentSpec) -> None:
    """The data files and the study's design of a valid spec: SpecError with every problem of both."""
    problems: list[Problem] = []
    try:
        check_data(path, overrides, spec)
    except SpecError as exc:
        problems += exc.problems
    if spec.ablation is not None:
        try:
            plan_study(path, overrides, size=False)
        except SpecError as exc:
            problems += [p for p in exc.problems if p not in problems]
    if problems:
        raise SpecError(problems)
    for line in data_notes(spec):
        print(line)


def cmd_validate(specs: Sequence[str], overrides: Sequence[str] = ()) -> int:
    """`ablate validate SPEC...`: `ok SPEC (hash)` for each valid spec, every problem of the others."""
    return validate_specs(specs, overrides, check=lambda path, spec: check_study(path, overrides, spec))
