"""The report's opening lines: for each published result a study checks (``ablation.expect``), whether its
runs reproduce it, contradict it, or cannot tell yet (the evidence and its judging:
ablate/report/compute/claim_evidence.py; this module renders the lines).

A claim is judged on the evidence the report's verdicts already use, never on a looser one:

- a study with adaptive seeds: the repeated confidence interval and verdict of its group-sequential test
  (ablate/report/sections/seeds.py, valid whenever the study stopped), on the metric the study decided by;
- any other study: the fixed-sample effect on the report's primary metric
(ablate/stats/fixed_sample.py).

Whether the evidence reproduces a claim, contradicts it or settles neither is decided by
``ablate.stats.claims.judge`` (its rules: reproduced by a significant difference the claimed way, by an
interval within a ``none`` claim's margin, by every paired seed equal for ``identical``; a variant that
diverged in at least half of its runs while the baseline never did failed to train: that is the "fails"
of a paper such as Xiong et al. 2020, post-LN without warm-up). This module gathers the evidence and
renders the lines. A variant that
changes two or more settings at once is judged on all of them together, and its line lists them. A line also
says where the variant's size differs from the baseline's by more than 5% (the size rides along with the
choice) and where the test split, on the same seeds and look, answers differently from validation.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import registry
from ablate.report.compute import statistics as st
from ablate.report.compute.arm_verdicts import Twice, twice
from ablate.report.compute.claim_evidence import Evidence, Outcome, claim_margin, claims_of, evidence, judge
from ablate.report.compute.comparisons import Answer, Design, design_of
from ablate.report.compute.loaded_study import Study, params_of, quality_meta, variant_diff
from ablate.report.compute.val_and_test import HeldOut, OnBothSplits, regime, verdicts
from ablate.report.render import Block, Bullets, Para, Section
from ablate.report.section_api import Inputs, Part, section
from ablate.report.sections.seeds import reopened_phrase
from ablate.spec.study_sections import Expectation

_EXPECTED = {"worse": "worse than the baseline", "better": "better than the baseline",
             "none": Answer.NO_EFFECT, "identical": "identical to the baseline in every seed"}


def as_run(study: Study, variant: str) -> str:
    """How the variant ran, where its paper leaves a choice open: the options of the components it
    chooses (``alibi_encoder=directional``) and the architecture, e.g. ' (alibi_encoder=directional,
    sources without bos or eos, in an encoder-decoder)'; '' for a variant without options or runs. Where an
    option shapes the encoder, the source's markers (``data.source_bos`` / ``source_eos``) are said too:
    relative positions count from them."""
    runs = study.of(variant)
    if not runs:
        return ""
    params = min(runs, key=lambda r: r.seed).params
    arch = params.get("model.arch", "encoder_decoder")
    shown = []
    shapes_encoder = False  # an option of the encoder was shown (never in a decoder-only run)
    for part in variant.split(", "):
        field, _, value = part.partition("=")
        kind = field.removeprefix("model.")
        if kind in registry.REGISTRY.kinds() and value in registry.names(kind):
            for option in registry.REGISTRY.entry(kind, value).options:
                if arch == "decoder_only" and "encoder" in option.name:  # no encoder for it to apply to
                    continue
                setting = params.get(f"model.{option.name}")
                if setting is not None and not (option.off is not None and str(setting) == str(option.off)):
                    shown.append(f"{option.name}={setting}")
                    shapes_encoder |= "encoder" in option.name
    if not shown:
        return ""
    if shapes_encoder:
        shown.append(_source_markers(params))
    spelled = arch.replace("_", "-")
    article = "an" if spelled[0] in "aeiou" else "a"
    return f" ({', '.join(shown)}, in {article} {spelled})"


def bundled(study: Study, variant: str) -> list[tuple[str, str, str]]:
    """The settings in which ``variant`` differs from the baseline when there are two or more of them
    (a tutorial preset, a paper's recipe), else []: a claim about one of them is then judged on all of them
    together, and its line must say so. A component's own options ("—" in the spec diff) belong to the
    component and are not counted apart from it. A label that already names every changed setting (a
    factorial cell such as ``residual=post_norm, train.schedule.warmup_steps=0``) says it itself."""
    diff = [d for d in variant_diff(study, variant) if d[1] != "—"]
    named = {part.partition("=")[0] for part in variant.split(", ")}
    if len(diff) < 2 or all(k in named or k.removeprefix("model.") in named for k, _, _ in diff):
        return []
    return diff


def _bundle_text(diff: list[tuple[str, str, str]]) -> str:
    settings = "; ".join(f"`{k}` {a} → {b}" for k, a, b in diff)
    return f" ({len(diff)} settings changed at once, judged together: {settings})"


# A variant whose parameter count differs from the baseline's by more than this share changes the model's size
# along with the choice a claim is about (tied embeddings: -42%), and its line says so.
SIZE_CHANGE = 0.05


def size_change(study: Study, variant: str) -> str:
    """' It has 42% fewer parameters than the baseline (4.18 M against 7.25 M): ...' where the variant's
    size differs by more than SIZE_CHANGE, else ''."""
    if study.baseline is None:
        return ""
    mine, base = params_of(study, variant), params_of(study, study.baseline)
    if not (math.isfinite(mine) and math.isfinite(base)) or base <= 0 or abs(mine / base - 1) <= SIZE_CHANGE:
        return ""
    share = abs(mine / base - 1)
    return (f" It has {share:.0%} {'fewer' if mine < base else 'more'} parameters than the baseline "
            f"({mine / 1e6:.2f} M against {base / 1e6:.2f} M): the size changes with the choice.")


def _test_disagrees(v: OnBothSplits | None, dec: int, unit: str) -> str:
    """' The test split, on the same seeds and look, answers differently: open (Δ +1.90 BLEU [...]).' where
    it does (validation decides; a reader should not have to find the warning further down), else ''."""
    if v is None or v.test is None or v.held_out not in (HeldOut.DISAGREES, HeldOut.UNSETTLED_EFFECT,
                                                          HeldOut.OPEN):
        return ""
    t = v.test
    ci = f" {st.fmt_interval(t.lo, t.hi, dec)}" if math.isfinite(t.lo) else ""
    if v.held_out == HeldOut.OPEN:  # neither confirms nor excludes it: said as open, not disagreeing
        return (f" The test split, on the same seeds and look, is open (Δ {st.fmt(t.diff, dec, True)} "
                f"{unit}{ci}).")
    return (f" The test split, on the same seeds and look, {v.flag_words().removeprefix('the test set ')} "
            f"(Δ {st.fmt(t.diff, dec, True)} {unit}{ci}).")


def _reopened(v: OnBothSplits | None, design: Design | None, dec: int, higher: bool, unit: str) -> str:
    """' At look 3 (5 seeds) it read worse ([-2.10, -0.12]), and the seeds since reopened it.' where the
    claim's comparison read an effect at an earlier look than the one shown, else ''."""
    if v is None or design is None or v.earlier is None:
        return ""
    phrase = reopened_phrase(v.earlier, design, dec, higher, unit)
    return f" {phrase[0].upper()}{phrase[1:]}."


def _at_own_best(t: Twice | None, dec: int, unit: str) -> str:
    """' At its own best settings the comparison reads -1.02 BLEU [...], n=6: open (its rounds continue)
    (see ...).' where tuning changed the verdict or has not settled it (a study with tune:), else ''."""
    if t is None or not (t.changed or t.pending):
        return ""
    reads = t.own.shown(dec, unit) if t.own is not None else "nothing yet (no run at its own best)"
    return f" At its own best settings the comparison reads {reads} (see Each variant at its own best)."


def _source_markers(params: dict[str, str]) -> str:
    """Which markers the run's sources carried (``data.source_bos`` / ``source_eos``; runs from before
    them had none), in words."""
    bos, eos = (str(params.get(f"data.source_{m}", False)).lower() == "true" for m in ("bos", "eos"))
    if bos and eos:
        return "sources wrapped in bos and eos"
    if bos or eos:
        return "sources ending in eos" if eos else "sources opening with bos"
    return "sources without bos or eos"


@dataclass(frozen=True)
class ClaimReading:
    """What the study says of one published claim: the facts a line and a report.json record both read."""

    claim: Expectation
    ev: Evidence | None  # None: the study has no runs of the claim's variant yet
    outcome: Outcome
    why: str
    found: str  # the difference, its interval and seeds, in words ("" without evidence)
    after: str  # what a hostile reader needs beside the finding: size, the test split, the own-best arm
    scoped: bool  # a claim about converged models, on a study that did not converge
    settings_bound: bool  # the outcome is the baseline-settings arm's alone (tuning changed or left it open)
    together: list[tuple[str, str, str]]  # the settings a bundled variant changes at once
    test_answer: str | None


def read_claim(study: Study, claim: Expectation, inp: Inputs, design: Design | None,
               on_test: dict[str, OnBothSplits], own: dict[str, Twice], unconverged: bool) -> ClaimReading:
    ev = (evidence(study, claim.variant, inp.effects, design, claim) if claim.variant in study.variants
          else None)
    after, found = "", ""
    if ev is None:
        outcome, why = judge(claim, None, True)
    else:
        unit, dec, higher = quality_meta(ev.metric)
        v = on_test.get(claim.variant)
        after = (size_change(study, claim.variant) + _test_disagrees(v, dec, unit)
                 + _reopened(v, design, dec, higher, unit)
                 + _at_own_best(own.get(claim.variant), dec, unit))
        outcome, why = judge(claim, ev, higher, unit)
        found = f"Δ {st.fmt(ev.diff, dec, True)} {unit}"
        if math.isfinite(ev.lo) and math.isfinite(ev.hi):
            found += f" {st.fmt_interval(ev.lo, ev.hi, dec)} ({ev.interval})"
        found += f", {ev.n} seed{'s' if ev.n != 1 else ''}"
        if ev.diverged:
            found += f"; {ev.diverged} of {ev.runs} runs diverged (the baseline: {ev.base_diverged})"
    t = own.get(claim.variant)
    return ClaimReading(
        claim, ev, outcome, why, found, after,
        scoped=claim.kind == "published" and claim.at_convergence and unconverged,
        settings_bound=ev is not None and t is not None and (t.changed or t.pending),
        together=bundled(study, claim.variant) if ev is not None else [],
        test_answer=on_test[claim.variant].test_answer if claim.variant in on_test else None)


def claim_line(r: ClaimReading, study: Study, design: Design | None) -> str:
    """'**Reproduced** (source): `variant` better than the baseline. This study: ... (Δ ...).'"""
    claim = r.claim
    expected = _EXPECTED[claim.effect]
    margin = claim_margin(claim, design.min_effect if design else None)
    if claim.effect == "none" and margin is not None:
        expected += f" (within ±{margin:g})"
    elif claim.effect in ("better", "worse") and claim.margin is not None:  # a margin claim says its own
        expected += f" by more than {claim.margin:g}"
    # tuning changed this comparison's verdict or has not settled it: the outcome is the baseline-settings
    # arm's alone, and the label says so before the reader reaches the own-best reading after it
    label = (r.outcome.capitalize() + (" at the baseline's settings" if r.settings_bound else "")
             + (", not tested at convergence" if r.scoped else ""))
    changed = _bundle_text(r.together) if r.together else ""
    return (f"**{label}** ({claim.source}): `{claim.variant}`{changed} {expected}. "
            f"This study{as_run(study, claim.variant)}: {r.why}" + (f" ({r.found})." if r.found else ".")
            + r.after)


def claim_record(r: ClaimReading) -> dict[str, object]:
    """The claim's entry in report.json's ``published``."""
    claim, ev = r.claim, r.ev
    return {"variant": claim.variant, "expected": claim.effect, "source": claim.source,
            "kind": claim.kind, "not_tested_at_convergence": r.scoped,
            "at_baseline_settings_only": r.settings_bound,
            "margin": claim.margin, "outcome": r.outcome, "why": r.why,
            "changes": [k for k, _, _ in r.together],
            "test_answer": r.test_answer,
            "metric": ev.metric if ev else None, "diff": ev.diff if ev else None,
            "lo": ev.lo if ev else None, "hi": ev.hi if ev else None, "n": ev.n if ev else 0}


@section(50)
def part(inp: Inputs) -> Part | None:
    """The report's first blocks (None when the study checks no published result); ``data['published']``:
    one record per claim."""
    study = inp.study
    claims = claims_of(study)
    if not claims or study.baseline is None:
        return None
    design = design_of(study)
    reg = regime(study)
    unconverged = reg is not None and reg.converged is False
    on_test = {v.variant: v for v in verdicts(study, design)} if design is not None else {}
    own = {t.variant: t for t in inp.derived(twice)}
    readings = [read_claim(study, claim, inp, design, on_test, own, unconverged) for claim in claims]
    lines = [claim_line(r, study, design) for r in readings if r.claim.kind != "identity"]
    checks = [claim_line(r, study, design) for r in readings if r.claim.kind == "identity"]
    metric = next((r.ev.metric for r in readings if r.ev is not None and r.ev.metric), study.primary)
    against = f"on `{metric}`, each variant against `{study.baseline}`"
    intro: list[Block] = []
    if lines:
        scope = ("; the study did not converge (see Regime above), so a result a paper reports for "
                 "converged models is not tested at convergence") if any(r.scoped for r in readings) else ""
        intro = [Para(f"**Published results this study checks** ({against}{scope}):"), Bullets(lines)]
    sections = [Section("Implementation checks", [
        Para(f"Two spellings of one function, checked {against}: these are tests of the implementation, "
             "not results from the literature."), Bullets(checks)])] if checks else []
    return Part("published", sections, intro=intro, data={"published": [claim_record(r) for r in readings]})
