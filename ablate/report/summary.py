"""The report's opening verdicts for an ablation: warnings about a quality metric stuck at its floor or
ceiling (``ablate.report.bounds``), then one line per variant against the baseline.

An adaptive study is summarised by the group-sequential test it chose its seeds by (``seeds``), any other
by each variant's fixed-sample verdict (``stats``): the summary never contradicts the section it points to.
"""

from __future__ import annotations

from ablate.report.bounds import bound_text
from ablate.report.part import Inputs, Part
from ablate.report.render import Block, Bullets, Note, Para
from ablate.report.seeds import decided_metric, sequential_summary


def part(inp: Inputs) -> Part:
    """Intro blocks only; ``data['warnings']``: the floor / ceiling warnings as shown."""
    study = inp.study
    warnings = [bound_text(b) for b in inp.bounds]
    intro: list[Block] = [Note(w) for w in warnings]
    sequential = sequential_summary(study)
    if sequential is not None:  # the verdicts the study stopped by, as in its Adaptive seeds section
        intro += [Para(f"**Summary** on `{decided_metric(study)}`, each variant against `{study.baseline}`, "
                       "by the group-sequential test this study chose its seeds by (see Adaptive seeds "
                       "below):"), Bullets(sequential)]
    elif verdicts := [r.verdict for r in inp.effects if r.metric == study.primary]:
        intro += [Para(f"**Summary** on `{study.primary}`, each variant against `{study.baseline}` "
                       "(details, tests and caveats below):"), Bullets(verdicts)]
    return Part("summary", intro=intro, data={"warnings": warnings})
