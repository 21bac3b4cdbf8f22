"""The report's "Each variant at its own best" section (``ablation.tune``): every comparison
twice, at the baseline's settings and with each variant at the best settings of its own search, with both
intervals and the verdict tuning changed flagged; and each variant's best settings beside the baseline's,
with how far they moved (`ablate.study.arm_settings.changes`).

A search's best settings are its run's ``ablate.best_settings`` tag; its score at the baseline's settings is
the trial that ran them (the search's first). Both arms are judged as ablate/report/compute/arm_verdicts.py
says.
"""

from __future__ import annotations

import json
import math
from typing import Any

from ablate.report.compute import statistics as st
from ablate.report.compute.arm_verdicts import (
    Change,
    TuneRecord,
    Twice,
    arm_design,
    changes,
    pending_text,
    show,
    tuning,
    twice,
)
from ablate.report.compute.comparisons import Answer, Tuning, decided_metric
from ablate.report.compute.loaded_study import Search, Study, quality_meta
from ablate.report.compute.val_and_test import OnBothSplits, verdicts
from ablate.report.render import Block, Note, Para, Section, Table
from ablate.report.section_api import Inputs, Part, section
from ablate.tracking import record


def _same(text: str | None, value: Any) -> bool:
    """A param as MLflow holds it (text) is the value (numbers compared as numbers)."""
    if text is None:
        return value is None
    try:
        return math.isclose(float(text), float(value), rel_tol=1e-9)
    except (TypeError, ValueError):
        return text == show(value) or text == str(value)


def at_baseline(search: Search, baseline: dict[str, Any], metric: str) -> float | None:
    """The search's score at the baseline's settings: its finished trial that ran them."""
    for t in search.trials:
        if t.status == "finished" and metric in t.metrics and all(
                _same(t.params.get(k), v) for k, v in baseline.items()):
            return t.metrics[metric]
    return None


def best_of(search: Search, metric: str, higher: bool) -> float | None:
    scores = [t.metrics[metric] for t in search.trials
              if t.status == "finished" and metric in t.metrics and math.isfinite(t.metrics[metric])]
    return (max(scores) if higher else min(scores)) if scores else None


def _moved(c: Change) -> str:
    """'train.optimizer.lr: 0.001 → 0.003 (x3)'; a choice or an unchanged value without the repetition."""
    if c.shown == "same":
        return f"{c.field}: {show(c.baseline)} (same)"
    tail = "" if "->" in c.shown else f" ({c.shown})"
    return f"{c.field}: {show(c.baseline)} → {show(c.best)}{tail}"


_TUNING_SHOWN = {Tuning.CHANGED: "**changed**", Tuning.PENDING: "pending: its rounds continue",
                 Tuning.SAME_CELLS: "same settings as the baseline: same cells",
                 Tuning.HOLDS: Tuning.HOLDS.value}


def _tuning_effect(t: Twice, unmoved: set[str]) -> Tuning:
    """What tuning did to this comparison: changed its verdict, has not settled it yet, left both the variant
    and the baseline at the baseline's settings (both arms are then the same cells), or held it."""
    if t.changed:
        return Tuning.CHANGED
    if t.pending:
        return Tuning.PENDING
    return Tuning.SAME_CELLS if t.variant in unmoved else Tuning.HOLDS


def _twice_table(rows: list[Twice], dec: int, unit: str, unmoved: set[str],
                 on_test: dict[str, OnBothSplits]) -> Table:
    body = [[t.variant, t.base.shown(dec, unit), t.own.shown(dec, unit) if t.own else "— (no runs yet)",
             _test_shown(on_test.get(t.variant), dec, unit), _TUNING_SHOWN[_tuning_effect(t, unmoved)]]
            for t in rows]
    return Table(["variant", "at the baseline's settings", "at its own best", "its own best on test",
                  "tuning"], body, "lllll",
                 "Each variant against the baseline, paired by seed: Δ [interval], the pairs it rests on "
                 "and the verdict, in each arm. The own-best arm selected its settings on validation, so its "
                 "validation reading is optimistic: the test split, on the same seeds and look, is beside it")


def _test_shown(v: OnBothSplits | None, dec: int, unit: str) -> str:
    """The own-best arm's test look: 'Δ [interval]: answer', flagged where it disagrees."""
    t = None if v is None else v.test
    if v is None or t is None or math.isnan(t.diff):
        return "—"
    ci = "" if math.isnan(t.lo) else f" {st.fmt_interval(t.lo, t.hi, dec)}"
    flag = v.flag_words()
    return f"{st.fmt(t.diff, dec, True)} {unit}{ci}: {v.test_answer}" + (f" ({flag})" if flag else "")


def _settings_rows(study: Study, tune: TuneRecord, metric: str, dec: int
                   ) -> tuple[list[list[str]], list[dict[str, object]]]:
    """Per variant: its best settings, how far each moved from the baseline's, its search's best score and
    its score at the baseline's settings (rows, and report.json's records)."""
    space = dict(tune.space)
    baseline = dict(tune.baseline)
    _, _, higher = quality_meta(metric)
    rows, records = [], []
    for search in study.searches:
        text = search.run.tags.get(record.BEST_SETTINGS)
        best = json.loads(text) if text else None
        moved = changes(space, baseline, best) if best is not None else []
        shown = "; ".join(_moved(c) for c in moved) if best is not None else "search not finished"
        far = max((c.of_range for c in moved), default=0.0)
        top, base = best_of(search, metric, higher), at_baseline(search, baseline, metric)
        rows.append([search.run.variant, shown, f"{far:.0%}" if best is not None else "—",
                     "—" if top is None else st.fmt(top, dec), "—" if base is None else st.fmt(base, dec),
                     str(len(search.trials))])
        records.append({"variant": search.run.variant, "best": best, "distance": far if best else None,
                        "changes": [{"field": c.field, "baseline": c.baseline, "best": c.best,
                                     "shown": c.shown, "of_range": c.of_range} for c in moved],
                        "best_score": top, "score_at_baseline_settings": base, "trials": len(search.trials)})
    return rows, records


def _method(tune: TuneRecord) -> str:
    steps = tune.fidelity_steps
    cell = tune.cell_steps
    fidelity = f"{steps:,} steps" if steps else "as long as a cell"
    if steps and cell:
        fidelity += f" ({steps / cell:.0%} of a cell's {cell:,})"
    space = ", ".join(f"`{k}`" for k in tune.space)
    return ("Every variant, the baseline included, got its own search with the same budget: "
            f"{tune.trials} trials of {fidelity}, sampler {tune.sampler} (seed {tune.seed}), pruner "
            f"{tune.pruner}, over {space}; each search's first trial is the baseline's settings. The "
            "study's seeds then ran each variant at its own best settings, at a cell's full length (a "
            "variant whose best settings are the baseline's reuses its cells).")


def shared_seed(study: Study, tune: TuneRecord) -> str | None:
    """The caveat where the searches trained on one of the study's evaluation seeds (a study run before
    ablate refused that): the search picked what suits that seed, and the verdicts are judged on it."""
    seeds = {r.seed for arm in [study, *study.arms.values()] for r in arm.runs}
    if tune.seed is None or tune.seed not in seeds:
        return None
    return (f"The searches trained their trials on seed {tune.seed}, which is also one of this study's "
            "evaluation seeds: each variant's setting was chosen on that seed's noise and then judged on it, "
            "which favours every tuned variant on that seed alike but not exactly (this study ran before "
            "ablate kept tuning and evaluation seeds apart).")


@section(100)
def part(inp: Inputs) -> Part | None:
    """``data['own_best']``: both arms' verdict per comparison; ``data['best_settings']``: per variant."""
    study = inp.study
    tune, design = tuning(study), arm_design(study)
    if tune is None or design is None:
        return None
    metric = decided_metric(study)
    unit, dec, _ = quality_meta(metric)
    rows = inp.derived(twice)
    settings, records = _settings_rows(study, tune, metric, dec)
    unmoved = {str(r["variant"]) for r in records if r["best"] is not None and r["distance"] == 0}
    if study.baseline not in unmoved:  # the baseline's own-best cells are new: every comparison reruns
        unmoved = set()
    blocks: list[Block] = [Para(_method(tune) + f" Both arms are judged on `{metric}` by the same test: "
                                f"{design.describe()}." + _precisions(study))]
    caveat = shared_seed(study, tune)
    if caveat is not None:
        blocks.append(Note(caveat, "warning"))
    own = study.arms.get(record.OWN_BEST_ARM)
    on_test = {v.variant: v for v in verdicts(own, design)} if own is not None and own.runs else {}
    if rows:
        blocks.append(_twice_table(rows, dec, unit, unmoved, on_test))
        changed = [t.variant for t in rows if t.changed]
        pending = [t for t in rows if t.pending]
        named = ", ".join(f"`{v}`" for v in changed)
        if changed:
            blocks.append(Para(f"Tuning changed the verdict of {named}: at the baseline's settings a "
                               "comparison measures how well those settings suit the variant as much as the "
                               "design choice."))
        elif pending:
            blocks.append(Para("Tuning changed no verdict among the comparisons both arms have settled."))
        else:
            blocks.append(Para("Tuning changed no verdict: each holds with every variant at its own best."))
        if pending:
            blocks.append(Note(pending_text(pending) + " Tuning may yet change these.", "info"))
    else:
        blocks.append(Note("no cell at each variant's own best has run yet: `ablate study` runs them once "
                           "every search is done.", "info"))
    if settings:
        blocks.append(Table(["variant", "best settings (baseline's → best)", "moved", f"best {metric}",
                             "at baseline's settings", "trials"], settings, "llrrrr",
                            f"Each variant's best settings and its search's scores on `{metric}` at the "
                            "tuning fidelity; moved: the largest change as a share of its searched range "
                            "(log ranges in log units, numeric choices by their steps, another choice 100%)"))
    data = {"own_best": [{"variant": t.variant, "baseline_settings": _look(t.base.look, t.base.answer),
                          "own_best": _look(t.own.look, t.own.answer) if t.own else None,
                          "own_best_test": _test_record(on_test.get(t.variant)),
                          "changed": t.changed, "tuning": _tuning_effect(t, unmoved)} for t in rows],
            "best_settings": records, "tuning_seed_is_an_evaluation_seed": caveat is not None}
    return Part("own_best", [Section("Each variant at its own best", blocks)], data=data)


def _precisions(study: Study) -> str:
    """' The searches' trials trained in bf16, the cells in fp32: ...' where they differ, else ''. A study's
    searches train at its pinned precision, but trials that ran before it pinned one keep theirs
    (ablate/study/precision.py)."""
    def ran(runs: list[Any]) -> set[str]:
        return {r.tags[record.PRECISION] for r in runs if r.tags.get(record.PRECISION)}

    trials = ran([t for s in study.searches for t in s.trials])
    own_best = study.arms[record.OWN_BEST_ARM].runs if record.OWN_BEST_ARM in study.arms else []
    cells = ran(study.runs) | ran(own_best)
    if not trials or not cells or trials == cells:
        return ""
    trained, measured = " and ".join(sorted(trials)), " and ".join(sorted(cells))
    if len(trials) > 1:
        return (f" The searches' trials trained in {trained}: the variants' searches did not all run alike, "
                "and the best settings they chose carry that difference.")
    return (f" The searches' trials trained in {trained}, the cells in {measured}: a setting chosen at one "
            "precision is measured at another, as it is at another length (the tuning fidelity); every "
            "variant's search ran alike.")


def _test_record(v: OnBothSplits | None) -> dict[str, object] | None:
    return None if v is None or v.test is None else _look(v.test, v.test_answer or Answer.OPEN)


def _look(look: Any, answer: str) -> dict[str, object]:
    if look is None:
        return {"answer": answer}
    return {"answer": answer, "n": look.n, "diff": look.diff, "lo": look.lo, "hi": look.hi,
            "state": look.state}

