"""The report's "Setup" section: what was run, in a few lines (the study, its seeds, the metric it is
judged on, the compute spent, its power plan as recorded and at its own seeds' spread), and the study's
identity in ``report.json``.
"""

from __future__ import annotations

from ablate.report.compute.arm_verdicts import every_run
from ablate.report.compute.detectable_effects import plans_of
from ablate.report.compute.loaded_study import QUALITY, Study
from ablate.report.compute.logged_datasets import data_note
from ablate.report.render import Block, Bullets, Note, Section
from ablate.report.section_api import Inputs, Part, section
from ablate.report.sections import mde
from ablate.report.sections import trials as search
from ablate.spec import metricnames
from ablate.tracking import record
from ablate.tracking.run_files import origin_id


def fmt_duration(seconds: float) -> str:
    s = int(round(seconds))
    return f"{s // 3600}h {s % 3600 // 60:02d}m {s % 60:02d}s ({seconds:,.1f} s)"


@section(20, ("ablation", "search"))
def part(inp: Inputs) -> Part:
    """``data``: the study's name, kind and parent run id (as exported, for an imported study)."""
    study = inp.study
    runs = study.runs
    seeds = sorted({r.seed for r in runs})
    # every rung, arm and trial
    total = sum(r.metrics.get(metricnames.WALL_TIME, 0.0) for r in every_run(study))
    p = study.parent
    parent_id = origin_id(p["run_id"], p["tags"])
    items = [f"Study `{study.name}` ({study.kind}), parent run `{parent_id}`, "
             f"{len(study.variants)} variants, {ladder_runs(study)}",
             f"Seeds: {', '.join(map(str, seeds)) or '—'}",
             f"Quality metric: `{study.primary}` "
             f"({'higher' if QUALITY[study.quality][2] else 'lower'} is better)",
             f"Total compute time (sum of run wall times): {fmt_duration(total)}"]
    if study.kind == "search":  # the tuner optimised its objectives; the quality metric is reported beside
        items[0] = f"Study `{study.name}` (search), parent run `{parent_id}`, {len(runs)} trials"
        goals = ", ".join(f"`{m}` ({'maximise' if up else 'minimise'})" for m, up in search.objectives(study))
        items[2] = f"Objective: {goals}; also reported: `{study.primary}`"
    if p["params"].get("ablation.design"):
        items.insert(1, f"Design: `{p['params']['ablation.design']}`")
    if study.arms or study.searches:
        items.insert(2, arms_text(study))
    if (plans := inp.derived(plans_of)) is not None:
        items.append(mde.setup_line(plans))
    items.append("Data, hardware, versions and the baseline's full spec: see the last section")
    blocks: list[Block] = [Bullets(items)]
    if study.dropped:
        blocks.append(Note(f"{study.dropped} superseded run(s) of an already covered (variant, seed) cell "
                           "were ignored (a retried cell keeps its best, latest run).", "info"))
    blocks += [Note(n, "info") for n in study.notes]
    if data := data_note(inp.datasets):  # some dataset was seen with more than one digest
        kind, text = data
        blocks.append(Note(text, kind))
    if mixed := mixed_precisions(study):
        blocks.append(Note(mixed))
    return Part("setup", [Section("Setup", blocks)],
                data={"study": study.name, "kind": study.kind, "parent_run_id": parent_id})


def ladder_runs(study: Study) -> str:
    """How many runs: a ladder's at every rung, each rung's count beside (the sections after the ladder's
    state its largest rung's)."""
    if len(study.rungs) < 2:
        return f"{len(study.runs)} runs"
    per = ", ".join(f"{len(s.runs)} at `{name}`" for name, s in study.rungs.items())
    return f"{sum(len(s.runs) for s in study.rungs.values())} runs over {len(study.rungs)} rungs ({per})"


def arms_text(study: Study) -> str:
    """What a study with tune: or confirm: ran besides its cells, and which runs the sections read."""
    parts = [f"{len(study.runs)} cells at the baseline's settings (the sections read these only, but for "
             "Each variant at its own best, Tuning budget, At a larger scale and Compute by part)"]
    if study.searches:
        trials = sum(len(s.trials) for s in study.searches)
        parts.append(f"{len(study.searches)} tuning searches ({trials} trials)")
    if record.OWN_BEST_ARM in study.arms:
        own = study.arms[record.OWN_BEST_ARM].runs
        at_base = {r.run_id for r in study.runs}
        shared = sum(r.run_id in at_base for r in own)
        # a variant whose best settings are the baseline's reuses its cells: say so, or the arms read as
        # twice the training they were
        reused = f" ({shared} of them the same cells as at the baseline's settings)" if shared else ""
        parts.append(f"{len(own)} cells at each variant's own best{reused}")
    if record.CONFIRM_ARM in study.arms:
        parts.append(f"{len(study.arms[record.CONFIRM_ARM].runs)} cells at the larger setting")
    return "Arms: " + "; ".join(parts)


def mixed_precisions(study: Study) -> str | None:
    """A warning when the cells of one arm trained at more than one precision (``train.precision: auto``
    on different machines, before studies pinned one): a pair that mixes them measures the precision as
    well as the variant. None when each arm trained at one (cells from before runs recorded theirs do not
    count: their precision is not known)."""
    found = []
    for name, arm in [("", study)] + [(f" ({n.replace('_', '-')} arm)", a) for n, a in study.arms.items()]:
        counts: dict[str, int] = {}
        unknown = 0
        for r in arm.runs:
            if r.status != "finished":
                continue
            if ran := r.tags.get(record.PRECISION):
                counts[ran] = counts.get(ran, 0) + 1
            else:
                unknown += 1
        if len(counts) > 1:
            more = f", and {unknown} from before runs recorded their precision" if unknown else ""
            found.append(", ".join(f"{p} ({n})" for p, n in sorted(counts.items())) + more + name)
    if not found:
        return None
    return ("the cells did not all train at one precision: " + "; ".join(found) + ". A paired comparison "
            "whose two cells differ in precision measures the precision as well as the variant; `ablate "
            "ablate` pins one precision per study and trains such cells again.")
