"""The published results a study checks (``ablation.expect``), as evidence for ``ablate.stats.claims.judge``:
the claims the parent run carries, and each claim's evidence read the way the report's verdicts read it
(the sequential interval of a study with adaptive seeds, on the metric it decided by, else the
fixed-sample effect of the Effects table with its Holm-adjusted p). ablate/report/sections/published.py
renders the lines.
"""

from __future__ import annotations

import math

from ablate.report.compute import statistics as st
from ablate.report.compute.comparisons import decided_metric, paired_differences
from ablate.report.compute.detectable_effects import rung_variance
from ablate.report.compute.loaded_study import EffectRow, Study, quality_meta
from ablate.spec.study_sections import Expectation
from ablate.stats.borderline import leave_one_out
from ablate.stats.claims import Evidence, Outcome, claim_margin, judge
from ablate.stats.replication_size import seeds_across
from ablate.stats.sequential import Design, walk
from ablate.stats.verdict import ALPHA, holm_significant, read

__all__ = ["Evidence", "Outcome", "claim_margin", "claims_of", "evidence", "judge"]


def claims_of(study: Study) -> list[Expectation]:
    """The expectations the study's record carries (``ablation.expect``); none on older studies."""
    return list(study.record.expect)


def evidence(study: Study, variant: str, rows: list[EffectRow], design: Design | None,
             claim: Expectation | None = None) -> Evidence:
    assert study.baseline is not None
    metric = decided_metric(study) if design else study.primary
    runs = study.of(variant)
    diverged = sum(r.status == "diverged" for r in runs)
    base_diverged = sum(r.status == "diverged" for r in study.of(study.baseline))
    paired = paired_differences(study, variant, metric)[0]
    diffs = [d for d in paired if d is not None and math.isfinite(d)]
    differing = sum(d != 0 for d in diffs)
    identical = bool(diffs) and differing == 0
    nan = math.nan
    if design is not None:
        question, margin = (claim.effect, claim.margin) if claim else (None, None)
        higher = quality_meta(metric)[2]
        said = read(walk(paired, design, question, margin, higher), higher, question=question, margin=margin)
        look = said.look
        if look is None:  # fewer pairs than the first planned look: the mean so far, no interval yet
            mean = sum(diffs) / len(diffs) if diffs else nan
            return Evidence(metric, mean, nan, nan, "repeated 95% CI", len(diffs), False, differing,
                            identical, design.min_effect, diverged, len(runs), base_diverged)
        across = None
        if look.final and claim is not None and claim.effect in ("better", "worse", "none") and look.sd > 0:
            # at the effect these seeds found and across its interval, never at an assumed one
            within = claim.effect == "none"
            margin = claim_margin(claim, design.min_effect) if within else (claim.margin or 0.0)
            way = 0 if within else (1 if (claim.effect == "better") == higher else -1)
            # on a ladder with the gap's rung-level variance where its rungs estimate one
            across = seeds_across(look.diff, look.lo, look.hi, look.sd, look.n, design.level,
                                  "within" if within else "beyond", margin or 0.0, direction=way,
                                  rung_var=rung_variance(study, variant, metric))
        return Evidence(metric, look.diff, look.lo, look.hi, f"repeated {1 - design.alpha:.0%} CI", look.n,
                        said.better is not None, differing, identical, design.min_effect, diverged, len(runs),
                        base_diverged, design.looks[-1] if look.final else None, None, across,
                        leave_one_out(diffs, 1 - design.nominal))
    row = next((r for r in rows if r.variant == variant and r.metric == metric), None)
    if row is None or not row.effect.tested:
        diff = row.effect.diff if row is not None else nan
        return Evidence(metric, diff, nan, nan, "95% CI", row.effect.n_min if row else 0, False, differing,
                        identical, None, diverged, len(runs), base_diverged)
    e = row.effect
    # A fixed seed list's comparisons are one family too: significance by the Holm-adjusted p of the
    # effects table, not the comparison's own p.
    kind = "bootstrap 95% CI" if e.interval == "bootstrap" else "95% CI"
    kind += f"; Holm-adjusted p {st.fmt_p(row.p_holm)}"
    significant = holm_significant(e.diff, row.p_holm)
    return Evidence(metric, e.diff, e.lo, e.hi, kind, e.n_min, significant, differing, identical, None,
                    diverged, len(runs), base_diverged, leave_one_out=leave_one_out(diffs, 1 - ALPHA))
