"""The report's opening verdicts for an ablation: warnings about a quality metric stuck at its floor or
ceiling (``ablate.report.compute.bounds``), then one line per variant against the baseline.

An adaptive study is summarised by the group-sequential test it chose its seeds by (``seeds``), any other
by each variant's fixed-sample verdict (``stats``): the summary never contradicts the section it points to.
A study with ``confirm:`` leads with the verdicts that hold at both scales (``at_scale``), and one with
``tune:`` names the verdicts tuning every variant changed (``arms``). A variant that changes the verdicts'
metric's own scale (label smoothing on a loss) is named, in the plan's words.
"""

from __future__ import annotations

from ablate.report.compute.arm_verdicts import pending_text, twice
from ablate.report.compute.bounds import bound_text
from ablate.report.compute.comparisons import decided_metric, design_of
from ablate.report.compute.loaded_study import quality_meta, scale_changes
from ablate.report.compute.val_and_test import regime, verdicts
from ablate.report.render import Block, Bullets, Note, Para
from ablate.report.section_api import Inputs, Part, section
from ablate.report.sections.forest_plot import test_text
from ablate.report.sections.larger_scale import deciding_words, holds_at_both, nothing_to_check
from ablate.report.sections.seeds import sequential_lines


@section(60)
def part(inp: Inputs) -> Part:
    """Intro blocks only; ``data['warnings']``: the floor / ceiling warnings as shown."""
    study = inp.study
    warnings = [bound_text(b) for b in inp.bounds]
    intro: list[Block] = [Note(w) for w in warnings] + _both_scales(inp)
    sequential = sequential_lines(study)
    design = design_of(study)
    if sequential is not None and design is not None:  # the verdicts the study stopped by (Adaptive seeds)
        metric = decided_metric(study)
        unit, dec, _ = quality_meta(metric)
        rows = verdicts(study, design)
        beside = {v.variant: test_text(v, dec, unit) for v in rows}
        lines = [line + beside.get(variant, "") for variant, line in sequential]
        flagged = [v for v in rows if v.agrees is False]
        where = " They hold for the regime stated above." if regime(study) is not None else ""
        intro += [Para(f"**Summary** on `{metric}`, each variant against `{study.baseline}`, by the "
                       "group-sequential test this study chose its seeds by (see Adaptive seeds below), "
                       f"with the test split beside each on the same seeds.{where}"), Bullets(lines)]
        if flagged:
            intro.append(Note(f"the test set flags {len(flagged)} validation verdict(s): "
                              + "; ".join(f"`{v.variant}`: {v.flag_words()}" for v in flagged)
                              + ". Validation decides; the test set is a second sample of sentences."))
    elif fixed := [r.verdict for r in inp.effects if r.metric == study.primary]:
        intro += [Para(f"**Summary** on `{study.primary}`, each variant against `{study.baseline}` "
                       "(details, tests and caveats below):"), Bullets(fixed)]
    metric = decided_metric(study) if design is not None else study.primary
    if scales := scale_changes(study, metric):
        intro.append(Note("; ".join(scales) + ".", "info"))
    both = inp.derived(twice)
    changed = [t for t in both if t.changed]
    if changed:
        intro.append(Para("**Tuning changed** " + "; ".join(
            f"`{t.variant}`: {t.base.verdict} at the baseline's settings, {t.own.verdict if t.own else '—'} "
            "at its own best" for t in changed) + " (see Each variant at its own best)."))
    if awaited := [t for t in both if t.pending and t.base.settled]:
        intro.append(Para(f"**{pending_text(awaited)}** (see Each variant at its own best)"))
    return Part("summary", intro=intro, data={"warnings": warnings})


def _both_scales(inp: Inputs) -> list[Block]:
    """The verdicts that hold at both scales first, then those that do not (a study with confirm:)."""
    found = holds_at_both(inp)
    if found is None:
        return []
    hold, other = found
    if not hold and not other:
        return [Para(f"**Holds at both scales**: none: {nothing_to_check(inp)} (see At a larger scale).")]
    held = "these held." if hold else "none is confirmed there yet."
    which = deciding_words(inp.study)
    blocks: list[Block] = [Para(f"**Holds at both scales**: the study's verdicts {which}, rerun at the "
                                f"larger setting (see At a larger scale): {held}")]
    if hold:
        blocks.append(Bullets(hold))
    if other:
        blocks += [Para("**Not confirmed at the larger setting**:"), Bullets(other)]
    return blocks
